// sqlite_outbox: the store a field-app guide recommends, as a baseline for evstore's
// in-process append. SQLite in WAL mode; every event goes into an `events` outbox table
// and, in the same transaction, one UPSERT merges it into its entity's JSON state in an
// `entities` projection table, with SQLite's own JSON functions. Prepared statements are
// made once and reused, as an app would.
//
//   sqlite_outbox --workload FILE --dir DIR [--single N] [--repeat N] [--no-status-index]
//
// Figures: events/s with synchronous=NORMAL and FULL, 1000 events per transaction (all
// events) and 1 per transaction (the first --single); bytes on disk per event after the
// 1000-per-transaction NORMAL run; the time of a list-by-status query.
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const usage =
    "usage: sqlite_outbox --workload FILE --dir DIR [--single N] [--repeat N] [--no-status-index]\n"
    "  --workload FILE    NDJSON append inputs (fieldops.py output)\n"
    "  --dir DIR          scratch directory for the database files\n"
    "  --single N         events appended one per transaction (default 10000)\n"
    "  --repeat N         runs of each 1000-per-transaction mode; the median is reported (default 1)\n"
    "  --no-status-index  no expression index on the status (list by status scans)\n";

// MARK: Schema and statements

static const char *const schema_sql =
    "CREATE TABLE events ("
    " id INTEGER PRIMARY KEY,"  // the rowid: insertion order is time order
    " entity TEXT NOT NULL,"
    " kind TEXT NOT NULL,"
    " body TEXT NOT NULL,"  // the event as the app received it (JSON)
    " created_at INTEGER NOT NULL"  // Unix ms
    ");"
    "CREATE TABLE entities ("
    " entity TEXT PRIMARY KEY,"
    " state TEXT NOT NULL,"  // JSON: {fields, status, history, sets, deleted}
    " version INTEGER NOT NULL"  // events.id of the last event folded in
    ");";

// An app that lists jobs by status indexes the expression it filters on.
static const char *const status_index_sql =
    "CREATE INDEX entities_status ON entities (json_extract(state, '$.status'));";

static const char *const insert_event_sql =
    "INSERT INTO events (entity, kind, body, created_at) VALUES (?1, ?2, ?3, ?4)";

// The state of an entity before its first event.
static const char *const empty_state =
    "'{\"fields\":{},\"status\":null,\"history\":[],\"sets\":{},\"deleted\":false}'";

enum kind { KIND_EDIT, KIND_STATUS, KIND_ADD, KIND_REMOVE, KIND_DELETE, KIND_RESTORE, KIND_COUNT };
static const char *const kind_names[KIND_COUNT] = {"edit",   "status", "add",
                                                   "remove", "delete", "restore"};

// How each kind changes the state @S@. Parameters: ?1 entity, ?2 the event's id (the new
// version), ?3 and ?4 the kind's own values.
// - edit: fields merged with json_patch (RFC 7396: a null value removes the field);
// - status: the current status set, and {status, id} appended to the history;
// - add/remove: a set is a JSON object whose keys are its elements (the element's text
//   when it is a string, its JSON otherwise), so membership is one json_patch with
//   true or null, and no key needs quoting into a JSON path;
// - delete/restore: a flag.
static const char *const kind_change[KIND_COUNT] = {
    [KIND_EDIT] = "json_patch(@S@, json_object('fields', json(?3)))",
    [KIND_STATUS] =
        "json_insert(json_set(@S@, '$.status', ?3), '$.history[#]', json_object('status', ?3, 'id', ?2))",
    [KIND_ADD] = "json_patch(@S@, json_object('sets', json_object(?3, json_object(?4, json('true')))))",
    [KIND_REMOVE] = "json_patch(@S@, json_object('sets', json_object(?3, json_object(?4, NULL))))",
    [KIND_DELETE] = "json_set(@S@, '$.deleted', json('true'))",
    [KIND_RESTORE] = "json_set(@S@, '$.deleted', json('false'))",
};

// Copies `template` with each @S@ replaced by `state`.
static void substitute(char *out, size_t capacity, const char *template, const char *state) {
    size_t used = 0, state_length = strlen(state);
    for (const char *p = template; *p;) {
        if (strncmp(p, "@S@", 3) == 0) {
            if (used + state_length >= capacity) fail("statement text too long");
            memcpy(out + used, state, state_length);
            used += state_length;
            p += 3;
        } else {
            if (used + 1 >= capacity) fail("statement text too long");
            out[used++] = *p++;
        }
    }
    out[used] = '\0';
}

// One UPSERT per kind: a new entity starts from the empty state with the change applied,
// an existing one has the change applied to its state.
static void upsert_sql(enum kind kind, char *out, size_t capacity) {
    char fresh[1024], existing[1024];
    substitute(fresh, sizeof fresh, kind_change[kind], empty_state);
    substitute(existing, sizeof existing, kind_change[kind], "state");
    int length = snprintf(out, capacity,
                          "INSERT INTO entities (entity, state, version) VALUES (?1, %s, ?2) "
                          "ON CONFLICT (entity) DO UPDATE SET state = %s, version = excluded.version",
                          fresh, existing);
    if (length < 0 || (size_t)length >= capacity) fail("statement text too long");
}

// MARK: Events, decoded before timing (as evstore's figure times decoded input)

struct event {
    enum kind kind;
    char *entity;
    char *value3;  // status, set name, or the fields object's JSON
    char *value4;  // the element's key
    const char *body;
    int body_length;
};

static enum kind parse_kind(struct span kind, size_t line) {
    for (int k = 0; k < KIND_COUNT; k++)
        if (span_equals(kind, kind_names[k])) return (enum kind)k;
    fail("line %zu: unknown kind %.*s", line, (int)kind.length, kind.start);
}

static struct event *decode_events(const struct lines *lines) {
    struct event *events = checked_malloc(lines->count * sizeof *events);
    for (size_t i = 0; i < lines->count; i++) {
        struct input_event input;
        if (!input_event_parse(lines->line[i], lines->length[i], &input))
            fail("line %zu is not a JSON object", i + 1);
        if (!span_is_string(input.entity) || !span_is_string(input.kind))
            fail("line %zu: entity and kind must be strings", i + 1);
        struct event *event = &events[i];
        *event = (struct event){.kind = parse_kind(input.kind, i + 1),
                                .entity = span_text(input.entity),
                                .body = lines->line[i],
                                .body_length = (int)lines->length[i]};
        switch (event->kind) {
        case KIND_EDIT:
            if (!input.fields.length || input.fields.start[0] != '{')
                fail("line %zu: edit needs a fields object", i + 1);
            event->value3 = span_text(input.fields);
            break;
        case KIND_STATUS:
            if (!span_is_string(input.status)) fail("line %zu: status needs a string status", i + 1);
            event->value3 = span_text(input.status);
            break;
        case KIND_ADD:
        case KIND_REMOVE:
            if (!span_is_string(input.set) || !input.element.length)
                fail("line %zu: %s needs a set and an element", i + 1, kind_names[event->kind]);
            event->value3 = span_text(input.set);
            event->value4 = span_text(input.element);
            break;
        default: break;
        }
    }
    return events;
}

static void free_events(struct event *events, size_t count) {
    for (size_t i = 0; i < count; i++) {
        free(events[i].entity);
        free(events[i].value3);
        free(events[i].value4);
    }
    free(events);
}

// MARK: The store

struct store {
    sqlite3 *db;
    sqlite3_stmt *begin, *commit, *insert_event, *upsert[KIND_COUNT];
};

static void check(sqlite3 *db, int result, const char *what) {
    if (result != SQLITE_OK)
        fail("%s: %s (%s)", what, db ? sqlite3_errmsg(db) : "", sqlite3_errstr(result));
}

static void exec(sqlite3 *db, const char *sql) {
    char *message = NULL;
    int result = sqlite3_exec(db, sql, NULL, NULL, &message);
    if (result != SQLITE_OK)
        fail("%s: %s (%s)", sql, message ? message : sqlite3_errmsg(db), sqlite3_errstr(result));
}

static sqlite3_stmt *prepare(sqlite3 *db, const char *sql) {
    sqlite3_stmt *statement = NULL;
    check(db, sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &statement, NULL), sql);
    return statement;
}

// Runs a statement that returns no rows, and makes it ready to run again.
static void run(sqlite3 *db, sqlite3_stmt *statement) {
    int result = sqlite3_step(statement);
    if (result != SQLITE_DONE)
        fail("%s: %s (%s)", sqlite3_sql(statement), sqlite3_errmsg(db), sqlite3_errstr(result));
    check(db, sqlite3_reset(statement), "sqlite3_reset");
}

static void remove_database(const char *path) {
    const char *suffixes[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof suffixes / sizeof *suffixes; i++) {
        char name[4096];
        snprintf(name, sizeof name, "%s%s", path, suffixes[i]);
        if (unlink(name) != 0 && errno != ENOENT) fail("cannot remove %s: %s", name, strerror(errno));
    }
}

static struct store store_create(const char *path, const char *synchronous, bool status_index) {
    remove_database(path);
    struct store store = {0};
    int result = sqlite3_open_v2(path, &store.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (result != SQLITE_OK)
        fail("cannot open %s: %s", path, store.db ? sqlite3_errmsg(store.db) : sqlite3_errstr(result));
    exec(store.db, "PRAGMA journal_mode = WAL");
    char pragma[64];
    snprintf(pragma, sizeof pragma, "PRAGMA synchronous = %s", synchronous);
    exec(store.db, pragma);
    exec(store.db, schema_sql);
    if (status_index) exec(store.db, status_index_sql);
    store.begin = prepare(store.db, "BEGIN IMMEDIATE");
    store.commit = prepare(store.db, "COMMIT");
    store.insert_event = prepare(store.db, insert_event_sql);
    for (int k = 0; k < KIND_COUNT; k++) {
        char sql[4096];
        upsert_sql((enum kind)k, sql, sizeof sql);
        store.upsert[k] = prepare(store.db, sql);
    }
    return store;
}

static void store_close(struct store *store) {
    sqlite3_stmt *statements[3 + KIND_COUNT] = {store->begin, store->commit, store->insert_event};
    memcpy(statements + 3, store->upsert, sizeof store->upsert);
    for (size_t i = 0; i < sizeof statements / sizeof *statements; i++)
        check(store->db, sqlite3_finalize(statements[i]), "sqlite3_finalize");
    check(store->db, sqlite3_close(store->db), "sqlite3_close");
    *store = (struct store){0};
}

static void bind_text(sqlite3 *db, sqlite3_stmt *statement, int index, const char *text, int length) {
    check(db, sqlite3_bind_text(statement, index, text, length, SQLITE_STATIC), "sqlite3_bind_text");
}

// The outbox row and the projection UPSERT of one event, inside the open transaction.
static void append(struct store *store, const struct event *event) {
    sqlite3 *db = store->db;
    sqlite3_stmt *insert = store->insert_event;
    bind_text(db, insert, 1, event->entity, -1);
    bind_text(db, insert, 2, kind_names[event->kind], -1);
    bind_text(db, insert, 3, event->body, event->body_length);
    check(db, sqlite3_bind_int64(insert, 4, now_unix_ms()), "sqlite3_bind_int64");
    run(db, insert);

    sqlite3_stmt *upsert = store->upsert[event->kind];
    bind_text(db, upsert, 1, event->entity, -1);
    check(db, sqlite3_bind_int64(upsert, 2, sqlite3_last_insert_rowid(db)), "sqlite3_bind_int64");
    if (event->value3) bind_text(db, upsert, 3, event->value3, -1);
    if (event->value4) bind_text(db, upsert, 4, event->value4, -1);
    run(db, upsert);
}

// Appends `count` events, `batch` per transaction; returns events/s.
static double append_all(struct store *store, const struct event *events, size_t count, size_t batch) {
    double start = now_seconds();
    for (size_t i = 0; i < count; i += batch) {
        size_t end = i + batch < count ? i + batch : count;
        run(store->db, store->begin);
        for (size_t j = i; j < end; j++) append(store, &events[j]);
        run(store->db, store->commit);
    }
    return (double)count / (now_seconds() - start);
}

// MARK: Measurements after the load

// Bytes per event of the database file and its WAL, after a truncating checkpoint.
static double bytes_on_disk(struct store *store, const char *path, size_t count) {
    int log_frames = 0, checkpointed = 0;
    check(store->db,
          sqlite3_wal_checkpoint_v2(store->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, &log_frames,
                                    &checkpointed),
          "sqlite3_wal_checkpoint_v2 (TRUNCATE)");
    char wal[4096];
    snprintf(wal, sizeof wal, "%s-wal", path);
    return (double)(file_size(path) + file_size(wal)) / (double)count;
}

// Bytes per event of each table and index, when SQLite is built with the dbstat table.
static void table_sizes(struct store *store, size_t count, struct report *report) {
    sqlite3_stmt *statement = NULL;
    if (sqlite3_prepare_v2(store->db,
                           "SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY name", -1,
                           &statement, NULL) != SQLITE_OK) {
        report_info(report, "table sizes", "not measured: this SQLite has no dbstat table");
        return;
    }
    int result;
    while ((result = sqlite3_step(statement)) == SQLITE_ROW) {
        char name[256];
        snprintf(name, sizeof name, "pages of %s per event (1000 per txn, NORMAL)",
                 (const char *)sqlite3_column_text(statement, 0));
        report_add(report, name, (double)sqlite3_column_int64(statement, 1) / (double)count, "B", "");
    }
    if (result != SQLITE_DONE) fail("dbstat: %s", sqlite3_errmsg(store->db));
    check(store->db, sqlite3_finalize(statement), "sqlite3_finalize");
}

// The statuses the workload uses, in order of first use.
static size_t distinct_statuses(const struct event *events, size_t count, const char **out,
                                size_t capacity) {
    size_t found = 0;
    for (size_t i = 0; i < count; i++) {
        if (events[i].kind != KIND_STATUS) continue;
        bool known = false;
        for (size_t j = 0; j < found && !known; j++) known = strcmp(out[j], events[i].value3) == 0;
        if (!known && found < capacity) out[found++] = events[i].value3;
    }
    return found;
}

// Times `SELECT entity FROM entities WHERE json_extract(state,'$.status') = ?` for each
// status the workload uses, five times each; reports the median.
static void list_by_status(struct store *store, const struct event *events, size_t count,
                           bool status_index, struct report *report) {
    const char *statuses[32];
    size_t status_count = distinct_statuses(events, count, statuses, 32);
    if (status_count == 0) return;
    sqlite3_stmt *query = prepare(
        store->db, "SELECT entity FROM entities WHERE json_extract(state, '$.status') = ?1");

    sqlite3_stmt *plan = prepare(
        store->db,
        "EXPLAIN QUERY PLAN SELECT entity FROM entities WHERE json_extract(state, '$.status') = ?1");
    char plan_text[512] = "";
    int result;
    while ((result = sqlite3_step(plan)) == SQLITE_ROW) {
        const char *detail = (const char *)sqlite3_column_text(plan, 3);
        if (detail) snprintf(plan_text + strlen(plan_text), sizeof plan_text - strlen(plan_text), "%s%s",
                             *plan_text ? "; " : "", detail);
    }
    if (result != SQLITE_DONE) fail("EXPLAIN QUERY PLAN: %s", sqlite3_errmsg(store->db));
    check(store->db, sqlite3_finalize(plan), "sqlite3_finalize");
    report_info(report, "list by status query plan", plan_text);

    double times[32 * 5];
    size_t samples = 0, rows = 0;
    for (int round = 0; round < 5; round++) {
        for (size_t s = 0; s < status_count; s++) {
            double start = now_seconds();
            bind_text(store->db, query, 1, statuses[s], -1);
            while ((result = sqlite3_step(query)) == SQLITE_ROW) {
                if (round == 0) rows++;
            }
            if (result != SQLITE_DONE) fail("list by status: %s", sqlite3_errmsg(store->db));
            check(store->db, sqlite3_reset(query), "sqlite3_reset");
            times[samples++] = (now_seconds() - start) * 1e3;
        }
    }
    check(store->db, sqlite3_finalize(query), "sqlite3_finalize");
    char note[256];
    snprintf(note, sizeof note, "median of %zu queries over %zu statuses, %.0f rows each on average; %s",
             samples, status_count, (double)rows / (double)status_count,
             status_index ? "expression index entities_status" : "no index (scan)");
    report_add(report, "list by status", median(times, samples), "ms", note);
}

// MARK: Main

int main(int argc, char **argv) {
    program_name = "sqlite_outbox";
    const char *workload = NULL, *directory = NULL;
    long long single = 10000, repeats = 1;
    bool status_index = true;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(arg, "--workload") == 0 && value) workload = argv[++i];
        else if (strcmp(arg, "--dir") == 0 && value) directory = argv[++i];
        else if (strcmp(arg, "--single") == 0) single = parse_count(usage, arg, value, 0, 1LL << 40), i++;
        else if (strcmp(arg, "--repeat") == 0) repeats = parse_count(usage, arg, value, 1, 100), i++;
        else if (strcmp(arg, "--no-status-index") == 0) status_index = false;
        else if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        } else usage_error(usage, "unknown or incomplete option '%s'", arg);
    }
    if (!workload || !directory) usage_error(usage, "--workload and --dir are required");
    check(NULL, sqlite3_initialize(), "sqlite3_initialize");
    make_directory(directory);

    struct lines lines = lines_read(workload, 0);
    struct event *events = decode_events(&lines);
    size_t count = lines.count;
    size_t single_count = (size_t)single < count ? (size_t)single : count;
    struct report *report = report_new("sqlite_outbox", workload, count);
    report_info(report, "sqlite", sqlite3_libversion());
    report_info(report, "schema", schema_sql);
    report_info(report, "status index", status_index ? status_index_sql : "none");
    char sql[4096];
    upsert_sql(KIND_STATUS, sql, sizeof sql);
    report_info(report, "upsert of a status event", sql);
    report_info(report, "journal", "WAL, default autocheckpoint (1000 pages)");

    char *normal_path = path_join(directory, "outbox-normal-1000.db");
    char *full_path = path_join(directory, "outbox-full-1000.db");
    double normal_rates[100], full_rates[100];
    struct store loaded = {0};  // the last NORMAL 1000-per-txn store, measured after the runs
    for (long long round = 0; round < repeats; round++) {
        if (loaded.db) store_close(&loaded);
        loaded = store_create(normal_path, "NORMAL", status_index);
        normal_rates[round] = append_all(&loaded, events, count, 1000);

        struct store store = store_create(full_path, "FULL", status_index);
        full_rates[round] = append_all(&store, events, count, 1000);
        store_close(&store);
    }
    double bytes_per_event = bytes_on_disk(&loaded, normal_path, count);
    char note[128];
    snprintf(note, sizeof note, "median of %lld; commits not fsynced (WAL synced at checkpoints)",
             repeats);
    report_add(report, "append, 1000 per txn, synchronous=NORMAL", median(normal_rates, (size_t)repeats),
               "events/s", note);
    snprintf(note, sizeof note, "median of %lld; WAL fsynced at each commit", repeats);
    report_add(report, "append, 1000 per txn, synchronous=FULL", median(full_rates, (size_t)repeats),
               "events/s", note);
    report_add(report, "bytes on disk per event (1000 per txn, NORMAL)", bytes_per_event, "B",
               "database file + WAL after wal_checkpoint(TRUNCATE)");
    table_sizes(&loaded, count, report);
    list_by_status(&loaded, events, count, status_index, report);
    store_close(&loaded);

    if (single_count > 0) {
        const char *modes[2] = {"NORMAL", "FULL"};
        for (int m = 0; m < 2; m++) {
            char name[128], file[64];
            snprintf(file, sizeof file, "outbox-%s-1.db", m ? "full" : "normal");
            char *path = path_join(directory, file);
            struct store store = store_create(path, modes[m], status_index);
            double rate = append_all(&store, events, single_count, 1);
            store_close(&store);
            free(path);
            snprintf(name, sizeof name, "append, 1 per txn, synchronous=%s, first %zu", modes[m],
                     single_count);
            report_add(report, name, rate, "events/s",
                       m ? "WAL fsynced at each commit" : "commits not fsynced");
        }
    }

    report_finish(report);
    free(normal_path);
    free(full_path);
    free_events(events, count);
    lines_free(&lines);
    return 0;
}
