// libzmq 4.3's ipc listener treats EMFILE from accept() as fatal (an assertion: the daemon
// aborts), and it accepts on its own I/O thread before the daemon can shed anything. This file
// defines accept() and accept4(), which the dynamic linker then binds libzmq's calls to, in
// front of the C library's: when the descriptor table is full, the reserve descriptor is let go,
// the waiting connection taken and closed at once (its peer sees it closed), the reserve taken
// again, and the caller told EAGAIN — which libzmq treats as "nothing to accept now".
#define _GNU_SOURCE
#include "CBeaconAcceptGuard.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

typedef int (*accept4_function)(int, struct sockaddr *, socklen_t *, int);
typedef int (*accept_function)(int, struct sockaddr *, socklen_t *);

static pthread_mutex_t reserve_lock = PTHREAD_MUTEX_INITIALIZER;
static int reserve = -1;
static atomic_ulong refused;

void beacon_accept_guard_arm(void) {
    pthread_mutex_lock(&reserve_lock);
    if (reserve < 0) reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
    pthread_mutex_unlock(&reserve_lock);
}

unsigned long beacon_accept_guard_refused(void) { return atomic_load(&refused); }

static accept4_function real_accept4(void) {
    static _Atomic(accept4_function) function;
    accept4_function found = atomic_load(&function);
    if (!found) {
        found = (accept4_function)dlsym(RTLD_NEXT, "accept4");
        atomic_store(&function, found);
    }
    return found;
}

static accept_function real_accept(void) {
    static _Atomic(accept_function) function;
    accept_function found = atomic_load(&function);
    if (!found) {
        found = (accept_function)dlsym(RTLD_NEXT, "accept");
        atomic_store(&function, found);
    }
    return found;
}

/// The descriptor table is full: takes one waiting connection off `listener` and closes it,
/// with the reserve's slot, and returns -1 with errno EAGAIN.
static int refuse_one(int listener) {
    pthread_mutex_lock(&reserve_lock);
    if (reserve >= 0) {
        close(reserve);
        int taken = real_accept4()(listener, NULL, NULL, SOCK_CLOEXEC);
        if (taken >= 0) {
            close(taken);
            atomic_fetch_add(&refused, 1);
        }
        reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    pthread_mutex_unlock(&reserve_lock);
    errno = EAGAIN;
    return -1;
}

int accept4(int listener, struct sockaddr *address, socklen_t *length, int flags) {
    int connection = real_accept4()(listener, address, length, flags);
    if (connection < 0 && (errno == EMFILE || errno == ENFILE)) return refuse_one(listener);
    return connection;
}

int accept(int listener, struct sockaddr *address, socklen_t *length) {
    int connection = real_accept()(listener, address, length);
    if (connection < 0 && (errno == EMFILE || errno == ENFILE)) return refuse_one(listener);
    return connection;
}
