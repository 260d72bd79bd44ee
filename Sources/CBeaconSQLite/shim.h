#ifndef CBEACON_SQLITE_SHIM_H
#define CBEACON_SQLITE_SHIM_H
#include <sqlite3.h>

/// SQLITE_TRANSIENT is a macro casting -1 to a function pointer; Swift cannot import it.
static inline sqlite3_destructor_type cbeacon_sqlite_transient(void) {
    return SQLITE_TRANSIENT;
}

/// sqlite3_config is variadic; Swift cannot call it. Turns off SQLite's memory statistics,
/// which take a global mutex on every allocation. Only valid before SQLite is first used.
static inline int cbeacon_sqlite_disable_memory_statistics(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}
#endif
