#ifndef CBEACON_KERNEL_SHIM_H
#define CBEACON_KERNEL_SHIM_H
// Kernel calls that Swift's Glibc module does not declare: glibc declares sched_getaffinity,
// sched_setaffinity and pthread_setname_np only under _GNU_SOURCE, which the module is built
// without, and Swift cannot call variadic functions such as ioctl.
#include <stddef.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <poll.h>

/// Writes the calling thread's CPU mask (bit n: CPU n may run it) into `mask`, whose size is a
/// multiple of 8 bytes. Returns the bytes the kernel wrote, or -1 with errno set.
static inline long cbeacon_get_thread_cpus(unsigned char *mask, size_t bytes) {
    return syscall(SYS_sched_getaffinity, 0, bytes, mask);
}

/// Sets the calling thread's CPU mask. Returns 0, or -1 with errno set.
static inline long cbeacon_set_thread_cpus(const unsigned char *mask, size_t bytes) {
    return syscall(SYS_sched_setaffinity, 0, bytes, mask);
}

/// Names the calling thread (the kernel keeps 15 bytes). Returns 0, or -1 with errno set.
static inline int cbeacon_name_thread(const char *name) {
    return prctl(PR_SET_NAME, name, 0, 0, 0);
}

/// Bytes written to the stream socket `fd` that its peer has not read yet (unix) or not
/// acknowledged yet (tcp): SIOCOUTQ. Returns them, or -1 with errno set.
static inline int cbeacon_unread_sent_bytes(int fd) {
    int bytes = 0;
    return ioctl(fd, TIOCOUTQ, &bytes) == 0 ? bytes : -1;
}

/// Whether the stream socket `fd` takes no more for now: the kernel's send queue is full (poll
/// says it is not writable). Returns 1 or 0, or -1 with errno set.
static inline int cbeacon_send_queue_full(int fd) {
    struct pollfd entry = { .fd = fd, .events = POLLOUT, .revents = 0 };
    int ready = poll(&entry, 1, 0);
    if (ready < 0) return -1;
    return ready == 0 || !(entry.revents & POLLOUT) ? 1 : 0;
}
#endif
