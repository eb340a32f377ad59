// redis_streams: Redis as an event log with a projection, as a baseline for evstore over
// its socket. One Lua script, loaded once, appends an event to a stream and folds it
// into the entity's projection; the client sends one EVALSHA per event, 1000 in flight
// at a time. Then the read that matches evstore's `get` (one entity's whole state, in one
// round trip through a second script) is timed with 1 and with 8 clients.
//
//   redis_streams --workload FILE --socket PATH [--requests N] [--flush]
//
// The server is started by the caller (Benchmarks/suite.py), for instance:
//   taskset -c 0 redis-server --port 0 --unixsocket /tmp/r/redis.sock --dir /tmp/r
//       --appendonly yes --appendfsync everysec --save ''
// and this client pinned to another CPU: taskset -c 1 redis_streams ...
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const usage =
    "usage: redis_streams --workload FILE --socket PATH [--requests N] [--flush]\n"
    "  --workload FILE   NDJSON append inputs (fieldops.py output)\n"
    "  --socket PATH     the Unix socket of a scratch redis-server\n"
    "  --requests N      reads timed per client count, split between the clients (default 20000)\n"
    "  --flush           empty the server first (FLUSHALL); without it a non-empty server is an error\n";

// Keys of an entity E: e:E (hash: f:<field> for each field, status, deleted, version),
// e:E:history (list of {"status","id"} JSON), e:E:sets (the names of its sets) and
// e:E:set:<name> (the set's elements: a string element as itself, others as JSON).
static const char *const append_script =
    "local event = cjson.decode(ARGV[1])\n"
    "local entity = KEYS[2]\n"
    "local id = redis.call('XADD', KEYS[1], '*', 'entity', event.entity, 'kind', event.kind, 'body', ARGV[1])\n"
    "local kind = event.kind\n"
    "if kind == 'edit' then\n"
    "  local set, clear = {'version', id}, {}\n"
    "  for field, value in pairs(event.fields) do\n"
    "    if value == cjson.null then clear[#clear + 1] = 'f:' .. field\n"
    "    else\n"
    "      set[#set + 1] = 'f:' .. field\n"
    "      set[#set + 1] = type(value) == 'string' and value or cjson.encode(value)\n"
    "    end\n"
    "  end\n"
    "  redis.call('HSET', entity, unpack(set))\n"
    "  if #clear > 0 then redis.call('HDEL', entity, unpack(clear)) end\n"
    "elseif kind == 'status' then\n"
    "  redis.call('HSET', entity, 'status', event.status, 'version', id)\n"
    "  redis.call('RPUSH', entity .. ':history', cjson.encode({status = event.status, id = id}))\n"
    "elseif kind == 'add' or kind == 'remove' then\n"
    "  local element = type(event.element) == 'string' and event.element or cjson.encode(event.element)\n"
    "  redis.call('SADD', entity .. ':sets', event.set)\n"
    "  redis.call(kind == 'add' and 'SADD' or 'SREM', entity .. ':set:' .. event.set, element)\n"
    "  redis.call('HSET', entity, 'version', id)\n"
    "elseif kind == 'delete' or kind == 'restore' then\n"
    "  redis.call('HSET', entity, 'deleted', kind == 'delete' and 1 or 0, 'version', id)\n"
    "else\n"
    "  return redis.error_reply('unknown kind ' .. tostring(kind))\n"
    "end\n"
    "return id\n";

// One entity's whole state in one round trip: the hash, the status history, and each set.
static const char *const get_script =
    "local entity = KEYS[1]\n"
    "local state = {redis.call('HGETALL', entity), redis.call('LRANGE', entity .. ':history', 0, -1)}\n"
    "for _, name in ipairs(redis.call('SMEMBERS', entity .. ':sets')) do\n"
    "  state[#state + 1] = {name, redis.call('SMEMBERS', entity .. ':set:' .. name)}\n"
    "end\n"
    "return state\n";

// MARK: hiredis, checked

static redisContext *connect_socket(const char *path) {
    redisContext *context = redisConnectUnix(path);
    if (!context) fail("redisConnectUnix %s: out of memory", path);
    if (context->err) fail("cannot connect to redis at %s: %s (is redis-server running there?)", path, context->errstr);
    struct timeval timeout = {30, 0};
    if (redisSetTimeout(context, timeout) != REDIS_OK) fail("redisSetTimeout: %s", context->errstr);
    return context;
}

// The reply of one command, or exits with the server's or the connection's error.
static redisReply *command(redisContext *context, int expected_type, int argc, const char **argv) {
    redisReply *reply = redisCommandArgv(context, argc, argv, NULL);
    if (!reply) fail("redis %s: %s", argv[0], context->errstr);
    if (reply->type == REDIS_REPLY_ERROR) fail("redis %s: %s", argv[0], reply->str);
    if (expected_type && reply->type != expected_type)
        fail("redis %s: unexpected reply type %d", argv[0], reply->type);
    return reply;
}

static char *load_script(redisContext *context, const char *script) {
    const char *argv[] = {"SCRIPT", "LOAD", script};
    redisReply *reply = command(context, REDIS_REPLY_STRING, 3, argv);
    char *sha = checked_strdup(reply->str);
    freeReplyObject(reply);
    return sha;
}

// The value of `field` in an INFO section, as text (empty when absent).
static void info_field(redisContext *context, const char *section, const char *field, char *out, size_t size) {
    const char *argv[] = {"INFO", section};
    redisReply *reply = command(context, REDIS_REPLY_STRING, 2, argv);
    out[0] = '\0';
    size_t length = strlen(field);
    for (const char *line = reply->str; line;) {
        if (strncmp(line, field, length) == 0 && line[length] == ':') {
            size_t n = strcspn(line + length + 1, "\r\n");
            if (n >= size) n = size - 1;
            memcpy(out, line + length + 1, n);
            out[n] = '\0';
            break;
        }
        const char *newline = strchr(line, '\n');
        line = newline ? newline + 1 : NULL;
    }
    freeReplyObject(reply);
}

static void config_value(redisContext *context, const char *name, char *out, size_t size) {
    const char *argv[] = {"CONFIG", "GET", name};
    redisReply *reply = command(context, REDIS_REPLY_ARRAY, 3, argv);
    snprintf(out, size, "%s", reply->elements == 2 ? reply->element[1]->str : "?");
    freeReplyObject(reply);
}

// MARK: Append

// Returns events/s for every event, 1000 EVALSHA in flight at a time.
static double append_all(redisContext *context, const char *sha, const struct lines *lines) {
    size_t key_capacity = 256;
    char *keys = checked_malloc(1000 * key_capacity);
    double start = now_seconds();
    for (size_t i = 0; i < lines->count; i += 1000) {
        size_t end = i + 1000 < lines->count ? i + 1000 : lines->count;
        for (size_t j = i; j < end; j++) {
            struct input_event event;
            if (!input_event_parse(lines->line[j], lines->length[j], &event) || !span_is_string(event.entity))
                fail("line %zu is not an append input with an entity", j + 1);
            char *entity = span_text(event.entity);
            char *key = keys + (j - i) * key_capacity;
            if (snprintf(key, key_capacity, "e:%s", entity) >= (int)key_capacity)
                fail("line %zu: entity too long for this client", j + 1);
            free(entity);
            const char *argv[] = {"EVALSHA", sha, "2", "events", key, lines->line[j]};
            size_t lengths[] = {7, strlen(sha), 1, 6, strlen(key), lines->length[j]};
            if (redisAppendCommandArgv(context, 6, argv, lengths) != REDIS_OK)
                fail("redisAppendCommandArgv: %s", context->errstr);
        }
        for (size_t j = i; j < end; j++) {
            void *reply = NULL;
            if (redisGetReply(context, &reply) != REDIS_OK) fail("EVALSHA (append): %s", context->errstr);
            redisReply *r = reply;
            if (r->type == REDIS_REPLY_ERROR) fail("EVALSHA (append) of line %zu: %s", j + 1, r->str);
            freeReplyObject(r);
        }
    }
    double rate = (double)lines->count / (now_seconds() - start);
    free(keys);
    return rate;
}

// MARK: Reads

// Distinct entities of the workload, sorted: the same list, in the same order, that
// evstore-socket-bench draws its `get` requests from.
static int compare_strings(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char **distinct_entities(const struct lines *lines, size_t *count) {
    char **names = checked_malloc(lines->count * sizeof *names);
    for (size_t i = 0; i < lines->count; i++) {
        struct input_event event;
        if (!input_event_parse(lines->line[i], lines->length[i], &event) || !span_is_string(event.entity))
            fail("line %zu is not an append input with an entity", i + 1);
        names[i] = span_text(event.entity);
    }
    qsort(names, lines->count, sizeof *names, compare_strings);
    size_t unique = 0;
    for (size_t i = 0; i < lines->count; i++) {
        if (unique && strcmp(names[unique - 1], names[i]) == 0) free(names[i]);
        else names[unique++] = names[i];
    }
    *count = unique;
    return names;
}

struct reader {
    const char *socket, *sha;  // sha NULL: PING instead of the read script
    char **entities;
    size_t entity_count, first, requests;
    double *samples;  // requests latencies in µs, written by this reader
    pthread_barrier_t *start;
};

static void *read_loop(void *argument) {
    struct reader *reader = argument;
    redisContext *context = connect_socket(reader->socket);
    char key[256];
    int result = pthread_barrier_wait(reader->start);
    if (result != 0 && result != PTHREAD_BARRIER_SERIAL_THREAD) fail("pthread_barrier_wait failed");
    for (size_t i = 0; i < reader->requests; i++) {
        size_t n = reader->first + i;
        const char *entity = reader->entities[(size_t)((unsigned long long)n * 2654435761ULL % reader->entity_count)];
        snprintf(key, sizeof key, "e:%s", entity);
        const char *get[] = {"EVALSHA", reader->sha, "1", key};
        const char *ping[] = {"PING"};
        double start = now_seconds();
        redisReply *reply = reader->sha ? redisCommandArgv(context, 4, get, NULL) : redisCommandArgv(context, 1, ping, NULL);
        reader->samples[i] = (now_seconds() - start) * 1e6;
        if (!reply) fail("%s: %s", reader->sha ? "EVALSHA (get)" : "PING", context->errstr);
        if (reply->type == REDIS_REPLY_ERROR) fail("%s: %s", reader->sha ? "EVALSHA (get)" : "PING", reply->str);
        if (reader->sha && (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2 || reply->element[0]->elements == 0))
            fail("EVALSHA (get) of %s: no state (was the workload appended?)", entity);
        freeReplyObject(reply);
    }
    redisFree(context);
    return NULL;
}

// Latencies in µs, sorted, of `requests` round trips spread over `clients` threads.
static double *latencies(const char *socket, const char *sha, char **entities, size_t entity_count,
                         size_t clients, size_t requests, size_t *count) {
    size_t per_client = requests / clients;
    double *samples = checked_malloc(per_client * clients * sizeof *samples);
    struct reader *readers = checked_malloc(clients * sizeof *readers);
    pthread_t *threads = checked_malloc(clients * sizeof *threads);
    pthread_barrier_t start;
    if (pthread_barrier_init(&start, NULL, (unsigned)clients) != 0) fail("pthread_barrier_init failed");
    for (size_t c = 0; c < clients; c++) {
        readers[c] = (struct reader){socket, sha, entities, entity_count, c * per_client, per_client,
                                     samples + c * per_client, &start};
        if (pthread_create(&threads[c], NULL, read_loop, &readers[c]) != 0) fail("pthread_create failed");
    }
    for (size_t c = 0; c < clients; c++)
        if (pthread_join(threads[c], NULL) != 0) fail("pthread_join failed");
    pthread_barrier_destroy(&start);
    free(readers);
    free(threads);
    *count = per_client * clients;
    qsort(samples, *count, sizeof *samples, compare_doubles);
    return samples;
}

// MARK: Main

int main(int argc, char **argv) {
    program_name = "redis_streams";
    const char *workload = NULL, *socket = NULL;
    long long requests = 20000;
    bool flush = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(arg, "--workload") == 0 && value) workload = argv[++i];
        else if (strcmp(arg, "--socket") == 0 && value) socket = argv[++i];
        else if (strcmp(arg, "--requests") == 0) requests = parse_count(usage, arg, value, 8, 1LL << 30), i++;
        else if (strcmp(arg, "--flush") == 0) flush = true;
        else if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        } else usage_error(usage, "unknown or incomplete option '%s'", arg);
    }
    if (!workload || !socket) usage_error(usage, "--workload and --socket are required");

    struct lines lines = lines_read(workload, 0);
    redisContext *context = connect_socket(socket);
    const char *dbsize[] = {"DBSIZE"};
    redisReply *reply = command(context, REDIS_REPLY_INTEGER, 1, dbsize);
    long long keys = reply->integer;
    freeReplyObject(reply);
    if (keys && !flush) fail("the server at %s holds %lld keys; use a scratch server, or --flush to empty it", socket, keys);
    if (keys) {
        const char *flushall[] = {"FLUSHALL"};
        freeReplyObject(command(context, REDIS_REPLY_STATUS, 1, flushall));
    }
    char *append_sha = load_script(context, append_script);
    char *get_sha = load_script(context, get_script);

    struct report *report = report_new("redis_streams", workload, lines.count);
    char text[256], version[64], aof[32], fsync[32];
    info_field(context, "server", "redis_version", version, sizeof version);
    report_info(report, "redis", version);
    snprintf(text, sizeof text, "%d.%d.%d", HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_PATCH);
    report_info(report, "hiredis", text);
    config_value(context, "appendonly", aof, sizeof aof);
    config_value(context, "appendfsync", fsync, sizeof fsync);
    snprintf(text, sizeof text, "appendonly %s, appendfsync %s", aof, fsync);
    report_info(report, "persistence", text);
    report_info(report, "append script", append_script);
    report_info(report, "get script", get_script);

    double rate = append_all(context, append_sha, &lines);
    snprintf(text, sizeof text, "XADD and the projection in one script; appendonly %s, appendfsync %s", aof, fsync);
    report_add(report, "append via EVALSHA, 1000 pipelined", rate, "events/s", text);

    char used_memory[64], aof_size[64], rewrites[64];
    info_field(context, "memory", "used_memory", used_memory, sizeof used_memory);
    info_field(context, "persistence", "aof_current_size", aof_size, sizeof aof_size);
    info_field(context, "persistence", "aof_rewrites", rewrites, sizeof rewrites);
    report_add(report, "used_memory per event", atof(used_memory) / (double)lines.count, "B", "INFO memory after the load");
    if (*aof_size) {
        snprintf(text, sizeof text, "aof_current_size after the load; %s AOF rewrites", *rewrites ? rewrites : "?");
        report_add(report, "AOF bytes per event", atof(aof_size) / (double)lines.count, "B", text);
    }

    size_t entity_count = 0;
    char **entities = distinct_entities(&lines, &entity_count);
    size_t client_counts[] = {1, 8};
    for (size_t i = 0; i < 2; i++) {
        size_t clients = client_counts[i], count = 0;
        char name[64];
        double *gets = latencies(socket, get_sha, entities, entity_count, clients, (size_t)requests, &count);
        snprintf(text, sizeof text, "%zu round trips of the get script (hash, history, sets)", count);
        snprintf(name, sizeof name, "get p50, %zu client(s)", clients);
        report_add(report, name, quantile_sorted(gets, count, 0.5), "µs", text);
        snprintf(name, sizeof name, "get p99, %zu client(s)", clients);
        report_add(report, name, quantile_sorted(gets, count, 0.99), "µs", text);
        free(gets);
        double *pings = latencies(socket, NULL, entities, entity_count, clients, (size_t)requests, &count);
        snprintf(name, sizeof name, "PING p50, %zu client(s)", clients);
        report_add(report, name, quantile_sorted(pings, count, 0.5), "µs", "the round-trip floor");
        snprintf(name, sizeof name, "PING p99, %zu client(s)", clients);
        report_add(report, name, quantile_sorted(pings, count, 0.99), "µs", "the round-trip floor");
        free(pings);
    }
    report_finish(report);

    for (size_t i = 0; i < entity_count; i++) free(entities[i]);
    free(entities);
    free(append_sha);
    free(get_sha);
    redisFree(context);
    lines_free(&lines);
    return 0;
}
