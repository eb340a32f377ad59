// The C ceiling of evstore-nats: publishes stored events (one JSON object a line, as
// evstored's `log` gives them) into a JetStream stream with libnats' asynchronous
// JetStream publish, each with the headers the bridge sets (Nats-Msg-Id, Evstore-Origin,
// Evstore-Node, Evstore-Seq) to `PREFIX.<type>`, at most --max-pending unacknowledged,
// then waits until JetStream has acknowledged every one. What the server allows a
// publisher on this machine, against which the bridge's backlog rate is judged.
//
//   nats_publish --url nats://127.0.0.1:4222 --stream S --prefix P --events FILE [--max-pending N]
//
// Prints one JSON object of figures (common.h's report).

#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static const char *usage =
    "usage: nats_publish --url URL --stream NAME --prefix PREFIX --events FILE [--max-pending N]";

// The text of the string member `key` of one JSON object line (no escapes in ids, origins
// and entity types), copied into `out` (at most `size` bytes); false when absent.
static bool member(const char *line, const char *key, char *out, size_t size) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *found = strstr(line, pattern);
    if (!found) return false;
    found += strlen(pattern);
    if (*found == '"') {
        found++;
        const char *end = strchr(found, '"');
        if (!end || (size_t)(end - found) >= size) return false;
        memcpy(out, found, (size_t)(end - found));
        out[end - found] = '\0';
        return true;
    }
    size_t length = strspn(found, "0123456789");
    if (length == 0 || length >= size) return false;
    memcpy(out, found, length);
    out[length] = '\0';
    return true;
}

static volatile long failures = 0;

static void on_error(jsCtx *js, jsPubAckErr *pae, void *closure) {
    (void)js;
    (void)closure;
    __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
    if (failures == 1) fprintf(stderr, "nats_publish: a publish failed: %s\n", pae->ErrText ? pae->ErrText : "?");
}

static void check(natsStatus status, const char *what) {
    if (status != NATS_OK) fail("%s: %s", what, natsStatus_GetText(status));
}

int main(int argc, char **argv) {
    program_name = "nats_publish";
    const char *url = NULL, *stream = NULL, *prefix = NULL, *path = NULL;
    long long max_pending = 1024;
    for (int index = 1; index < argc; index++) {
        const char *flag = argv[index];
        if (index + 1 >= argc) usage_error(usage, "%s needs a value", flag);
        const char *value = argv[++index];
        if (!strcmp(flag, "--url")) url = value;
        else if (!strcmp(flag, "--stream")) stream = value;
        else if (!strcmp(flag, "--prefix")) prefix = value;
        else if (!strcmp(flag, "--events")) path = value;
        else if (!strcmp(flag, "--max-pending")) max_pending = parse_count(usage, flag, value, 1, 1 << 20);
        else usage_error(usage, "unknown option %s", flag);
    }
    if (!url || !stream || !prefix || !path) usage_error(usage, "--url, --stream, --prefix and --events are required");
    struct lines events = lines_read(path, 0);

    natsConnection *connection = NULL;
    jsCtx *js = NULL;
    jsOptions options;
    check(natsConnection_ConnectTo(&connection, url), "connecting");
    check(jsOptions_Init(&options), "jsOptions_Init");
    options.PublishAsync.MaxPending = max_pending;
    options.PublishAsync.ErrHandler = on_error;
    check(natsConnection_JetStream(&js, connection, &options), "natsConnection_JetStream");

    char subject[256], id[64], origin[64], type[80], seq[32];
    double started = now_seconds();
    for (size_t index = 0; index < events.count; index++) {
        const char *line = events.line[index];
        char entity[256];
        if (!member(line, "id", id, sizeof id) || !member(line, "origin", origin, sizeof origin)
            || !member(line, "entity", entity, sizeof entity))
            fail("line %zu is not a stored event with an id, an origin and an entity", index + 1);
        if (!member(line, "seq", seq, sizeof seq)) snprintf(seq, sizeof seq, "%zu", index + 1);
        char *slash = strchr(entity, '/');
        size_t length = slash ? (size_t)(slash - entity) : strlen(entity);
        if (length >= sizeof type) length = sizeof type - 1;
        memcpy(type, entity, length);
        type[length] = '\0';
        snprintf(subject, sizeof subject, "%s.%s", prefix, type);
        natsMsg *message = NULL;
        check(natsMsg_Create(&message, subject, NULL, line, (int)events.length[index]), "natsMsg_Create");
        check(natsMsgHeader_Set(message, "Nats-Msg-Id", id), "natsMsgHeader_Set");
        check(natsMsgHeader_Set(message, "Evstore-Origin", origin), "natsMsgHeader_Set");
        check(natsMsgHeader_Set(message, "Evstore-Node", origin), "natsMsgHeader_Set");
        check(natsMsgHeader_Set(message, "Evstore-Seq", seq), "natsMsgHeader_Set");
        jsPubOptions publish;
        check(jsPubOptions_Init(&publish), "jsPubOptions_Init");
        publish.ExpectStream = stream;
        // On success the library owns the message and destroys it once acknowledged.
        check(js_PublishMsgAsync(js, &message, &publish), "js_PublishMsgAsync");
    }
    jsPubOptions complete;
    check(jsPubOptions_Init(&complete), "jsPubOptions_Init");
    complete.MaxWait = 60000;
    check(js_PublishAsyncComplete(js, &complete), "js_PublishAsyncComplete");
    double elapsed = now_seconds() - started;
    if (failures > 0) fail("%ld publishes failed", failures);

    char note[128];
    snprintf(note, sizeof note, "%zu events in %.2f s, at most %lld unacknowledged", events.count, elapsed, max_pending);
    struct report *report = report_new(program_name, path, events.count);
    report_info(report, "libnats", nats_GetVersion());
    report_add(report, "publish, asynchronous JetStream", (double)events.count / elapsed, "events/s", note);
    report_finish(report);

    jsCtx_Destroy(js);
    natsConnection_Destroy(connection);
    nats_Close();
    lines_free(&events);
    return 0;
}
