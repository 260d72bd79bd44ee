/*
 * What one change-log append costs SQLite itself, for the journal's schemas: the rows beacond
 * writes under load (64-byte values, 1,000 keys, 2,048 rows per transaction, WAL,
 * synchronous=NORMAL, the journal's pragmas), with no Swift in the way.
 *
 *   cc -O2 scripts/sqlite-append-cost.c -lsqlite3 -o /tmp/sqlite-append-cost
 *   /tmp/sqlite-append-cost schema3 1000000          # wall-clock µs per row
 *   valgrind --tool=callgrind /tmp/sqlite-append-cost schema4 100000   # instructions (repeatable)
 *   /tmp/sqlite-append-cost schema4 100000 memstatus # with SQLite's memory statistics on
 *
 * schema3: the log of journal schema 3, a WITHOUT ROWID table keyed by (revision, part).
 * schema4: the log of journal schema 4, a rowid table keyed by position = revision * 2048 + part.
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void run(sqlite3 *db, const char *sql) {
    char *error = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &error) != SQLITE_OK) {
        fprintf(stderr, "%s: %s\n", sql, error);
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s schema3|schema4 ROWS [memstatus]\n", argv[0]);
        return 64;
    }
    int schema4 = strcmp(argv[1], "schema4") == 0;
    long rows = atol(argv[2]);
    if (argc < 4 || strcmp(argv[3], "memstatus") != 0) sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);

    char path[] = "/tmp/sqlite-append-cost-XXXXXX";
    if (!mkdtemp(path)) return 1;
    char file[64], wal[72];
    snprintf(file, sizeof file, "%s/j.sqlite", path);
    snprintf(wal, sizeof wal, "%s-wal", file);

    sqlite3 *db;
    if (sqlite3_open_v2(file, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) return 1;
    run(db, "PRAGMA locking_mode = EXCLUSIVE; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
            "PRAGMA cache_size = -65536; PRAGMA mmap_size = 268435456; PRAGMA wal_autocheckpoint = 10000");
    const char *insert;
    if (schema4) {
        run(db, "CREATE TABLE change_log (position INTEGER PRIMARY KEY, parts INTEGER NOT NULL, kind INTEGER NOT NULL,"
                " key TEXT NOT NULL, value BLOB NOT NULL, version INTEGER NOT NULL, create_revision INTEGER NOT NULL,"
                " expires_at INTEGER NOT NULL, timestamp INTEGER NOT NULL, write_id BLOB, session BLOB NOT NULL DEFAULT x'')");
        insert = "INSERT INTO change_log(position, parts, kind, key, value, version, create_revision, expires_at, timestamp, write_id, session)"
                 " VALUES (?1, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";
    } else {
        run(db, "CREATE TABLE changes (revision INTEGER NOT NULL, part INTEGER NOT NULL, parts INTEGER NOT NULL,"
                " kind INTEGER NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, version INTEGER NOT NULL,"
                " create_revision INTEGER NOT NULL, expires_at INTEGER NOT NULL, timestamp INTEGER NOT NULL,"
                " write_id BLOB, session BLOB NOT NULL DEFAULT x'', PRIMARY KEY (revision, part)) WITHOUT ROWID");
        insert = "INSERT INTO changes(revision, part, parts, kind, key, value, version, create_revision, expires_at, timestamp, write_id, session)"
                 " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";
    }
    sqlite3_stmt *statement;
    if (sqlite3_prepare_v3(db, insert, -1, SQLITE_PREPARE_PERSISTENT, &statement, NULL) != SQLITE_OK) {
        fprintf(stderr, "%s\n", sqlite3_errmsg(db));
        return 1;
    }

    unsigned char value[66];
    memset(value, 7, sizeof value);
    char key[32];
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (long revision = 1; revision <= rows;) {
        run(db, "BEGIN IMMEDIATE");
        for (int i = 0; i < 2048 && revision <= rows; i++, revision++) {
            snprintf(key, sizeof key, "bench.key.%ld", revision % 1000);
            sqlite3_bind_int64(statement, 1, schema4 ? revision << 11 : revision);  /* part 0 */
            sqlite3_bind_int64(statement, 2, 0);
            sqlite3_bind_int64(statement, 3, 1);
            sqlite3_bind_int64(statement, 4, 0);
            sqlite3_bind_text(statement, 5, key, -1, SQLITE_STATIC);
            sqlite3_bind_blob(statement, 6, value, sizeof value, SQLITE_STATIC);
            sqlite3_bind_int64(statement, 7, revision / 1000 + 1);
            sqlite3_bind_int64(statement, 8, revision % 1000 + 1);
            sqlite3_bind_int64(statement, 9, 0);
            sqlite3_bind_int64(statement, 10, 1763780000000LL + revision / 100);
            sqlite3_bind_null(statement, 11);
            sqlite3_bind_blob(statement, 12, "", 0, SQLITE_STATIC);
            if (sqlite3_step(statement) != SQLITE_DONE) {
                fprintf(stderr, "insert: %s\n", sqlite3_errmsg(db));
                return 1;
            }
            sqlite3_reset(statement);
        }
        run(db, "COMMIT");
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    double seconds = (double)(end.tv_sec - start.tv_sec) + (double)(end.tv_nsec - start.tv_nsec) / 1e9;
    printf("%s: %ld rows, %.2f µs per row\n", argv[1], rows, seconds / (double)rows * 1e6);

    sqlite3_finalize(statement);
    sqlite3_close(db);
    unlink(wal);
    unlink(file);
    rmdir(path);
    return 0;
}
