// lmdb_ceiling: the physical ceiling of an append. Each event's canonical JSON is
// compressed with zstd and a dictionary trained on the events themselves, and put under
// a time-ordered 16-byte key into one bare LMDB database, 1000 per durable transaction:
// no decoding, no index, no projection. It does what the ceiling inside evstore-bench
// does (one reused ZSTD_CCtx with the CDict referenced, level 3, content size in the
// frame, no checksum, no dictionary id; MDB_APPEND; LMDB's default fsync at commit), so
// the two can be compared.
//
//   lmdb_ceiling --workload FILE --dir DIR [--canonical FILE] [--repeat N]
//                [--samples N] [--dict-bytes N] [--level N]
//
// The input is one JSON document per line. evstore stores its events' canonical JSON
// (with id, origin and causal context), so --canonical should name a file of those;
// without it the workload's append inputs stand in (shorter, so not like for like).
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <errno.h>
#include <lmdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zdict.h>
#include <zstd.h>

static const char *const usage =
    "usage: lmdb_ceiling --workload FILE --dir DIR [--canonical FILE] [--repeat N]\n"
    "                    [--samples N] [--dict-bytes N] [--level N]\n"
    "  --workload FILE    NDJSON append inputs; the input when --canonical is not given\n"
    "  --canonical FILE   the events' canonical JSON, one per line (what evstore stores)\n"
    "  --dir DIR          scratch directory for the LMDB environment\n"
    "  --repeat N         timed runs; the median is reported (default 1)\n"
    "  --samples N        events the dictionary is trained on (default 20000)\n"
    "  --dict-bytes N     dictionary capacity (default 32768)\n"
    "  --level N          zstd level (default 3)\n";

static void check_lmdb(int result, const char *what) {
    if (result != MDB_SUCCESS) fail("%s: %s", what, mdb_strerror(result));
}

static size_t check_zstd(size_t result, const char *what) {
    if (ZSTD_isError(result)) fail("%s: %s", what, ZSTD_getErrorName(result));
    return result;
}

// MARK: Dictionary

struct dictionary {
    void *bytes;
    size_t size;
    double training_ms;
};

static struct dictionary train(const struct lines *lines, size_t samples, size_t capacity) {
    if (samples > lines->count) samples = lines->count;
    size_t total = 0;
    for (size_t i = 0; i < samples; i++) total += lines->length[i];
    char *joined = checked_malloc(total);
    size_t *sizes = checked_malloc(samples * sizeof *sizes);
    for (size_t i = 0, offset = 0; i < samples; i++) {
        memcpy(joined + offset, lines->line[i], lines->length[i]);
        offset += lines->length[i];
        sizes[i] = lines->length[i];
    }
    struct dictionary dictionary = {.bytes = checked_malloc(capacity)};
    // Only the training is timed; gathering the samples is not.
    double start = now_seconds();
    size_t size = ZDICT_trainFromBuffer(dictionary.bytes, capacity, joined, sizes, (unsigned)samples);
    dictionary.training_ms = (now_seconds() - start) * 1e3;
    if (ZDICT_isError(size))
        fail("ZDICT_trainFromBuffer: %s (train on more samples, or a smaller --dict-bytes)",
             ZDICT_getErrorName(size));
    dictionary.size = size;
    free(joined);
    free(sizes);
    return dictionary;
}

// MARK: Keys

// Time-ordered 16-byte keys like a ULID: 48-bit Unix milliseconds, then an 80-bit
// counter, big-endian. A new millisecond starts the counter at a random value below
// 2^79 (room to increment); the same millisecond increments it, so keys only grow and
// every put can use MDB_APPEND.
struct key_clock {
    long long ms;
    uint16_t high;  // the counter's top 16 bits
    uint64_t low;   // and its low 64
    uint64_t random;
};

static uint64_t next_random(struct key_clock *clock) {
    // xorshift64*: cheap and good enough to spread counters.
    clock->random ^= clock->random >> 12;
    clock->random ^= clock->random << 25;
    clock->random ^= clock->random >> 27;
    return clock->random * 0x2545F4914F6CDD1DULL;
}

static void next_key(struct key_clock *clock, unsigned char key[16]) {
    long long ms = now_unix_ms();
    if (ms > clock->ms) {
        clock->ms = ms;
        clock->high = (uint16_t)(next_random(clock) & 0x7FFF);
        clock->low = next_random(clock);
    } else if (++clock->low == 0) {
        clock->high++;
    }
    for (int i = 0; i < 6; i++) key[i] = (unsigned char)(clock->ms >> (40 - 8 * i));
    key[6] = (unsigned char)(clock->high >> 8);
    key[7] = (unsigned char)clock->high;
    for (int i = 0; i < 8; i++) key[8 + i] = (unsigned char)(clock->low >> (56 - 8 * i));
}

// MARK: The run

struct run {
    double rate;
    size_t value_bytes;
    long long file_bytes;
    size_t pages_bytes;
};

static void remove_environment(const char *directory) {
    const char *names[] = {"data.mdb", "lock.mdb"};
    for (size_t i = 0; i < 2; i++) {
        char *path = path_join(directory, names[i]);
        if (unlink(path) != 0 && errno != ENOENT) fail("cannot remove %s: %s", path, strerror(errno));
        free(path);
    }
}

static MDB_env *open_environment(const char *directory, size_t map_size) {
    MDB_env *env = NULL;
    check_lmdb(mdb_env_create(&env), "mdb_env_create");
    int result = mdb_env_set_maxdbs(env, 2);
    if (result == MDB_SUCCESS) result = mdb_env_set_mapsize(env, map_size);
    // Default flags: a commit writes and fsyncs. MDB_NOTLS as evstore opens its environment.
    if (result == MDB_SUCCESS) result = mdb_env_open(env, directory, MDB_NOTLS, 0644);
    if (result != MDB_SUCCESS) {
        mdb_env_close(env);
        fail("cannot open the LMDB environment in %s: %s", directory, mdb_strerror(result));
    }
    return env;
}

static struct run run_once(const char *directory, const struct lines *lines, ZSTD_CCtx *context,
                           size_t map_size) {
    remove_environment(directory);
    MDB_env *env = open_environment(directory, map_size);
    MDB_txn *txn = NULL;
    MDB_dbi dbi;
    check_lmdb(mdb_txn_begin(env, NULL, 0, &txn), "mdb_txn_begin");
    check_lmdb(mdb_dbi_open(txn, "events", MDB_CREATE, &dbi), "mdb_dbi_open events");
    check_lmdb(mdb_txn_commit(txn), "mdb_txn_commit");

    size_t longest = 0;
    for (size_t i = 0; i < lines->count; i++)
        if (lines->length[i] > longest) longest = lines->length[i];
    size_t capacity = ZSTD_compressBound(longest);
    unsigned char *frame = checked_malloc(capacity);
    struct key_clock clock = {.random = 0x9E3779B97F4A7C15ULL ^ (uint64_t)getpid()};
    struct run run = {0};

    double start = now_seconds();
    for (size_t i = 0; i < lines->count; i += 1000) {
        size_t end = i + 1000 < lines->count ? i + 1000 : lines->count;
        check_lmdb(mdb_txn_begin(env, NULL, 0, &txn), "mdb_txn_begin");
        for (size_t j = i; j < end; j++) {
            unsigned char key_bytes[16];
            next_key(&clock, key_bytes);
            size_t size = check_zstd(ZSTD_compress2(context, frame, capacity, lines->line[j], lines->length[j]),
                                     "ZSTD_compress2");
            run.value_bytes += size;
            MDB_val key = {sizeof key_bytes, key_bytes}, value = {size, frame};
            check_lmdb(mdb_put(txn, dbi, &key, &value, MDB_APPEND), "mdb_put");
        }
        check_lmdb(mdb_txn_commit(txn), "mdb_txn_commit");
    }
    run.rate = (double)lines->count / (now_seconds() - start);
    free(frame);

    MDB_envinfo info;
    MDB_stat stat;
    check_lmdb(mdb_env_info(env, &info), "mdb_env_info");
    check_lmdb(mdb_env_stat(env, &stat), "mdb_env_stat");
    run.pages_bytes = (info.me_last_pgno + 1) * stat.ms_psize;
    mdb_env_close(env);
    char *data = path_join(directory, "data.mdb");
    run.file_bytes = file_size(data);
    free(data);
    return run;
}

// Reads every value back and checks it decompresses to its line: the ceiling must store
// what it claims to. Not timed.
static void verify(const char *directory, const struct lines *lines, const struct dictionary *dictionary,
                   size_t map_size) {
    MDB_env *env = open_environment(directory, map_size);
    MDB_txn *txn = NULL;
    MDB_dbi dbi;
    MDB_cursor *cursor = NULL;
    check_lmdb(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), "mdb_txn_begin (read)");
    check_lmdb(mdb_dbi_open(txn, "events", 0, &dbi), "mdb_dbi_open events");
    check_lmdb(mdb_cursor_open(txn, dbi, &cursor), "mdb_cursor_open");
    ZSTD_DCtx *context = ZSTD_createDCtx();
    ZSTD_DDict *ddict = ZSTD_createDDict(dictionary->bytes, dictionary->size);
    if (!context || !ddict) fail("ZSTD_createDCtx/ZSTD_createDDict: out of memory");
    char *buffer = NULL;
    size_t buffer_size = 0, index = 0;
    MDB_val key, value;
    int result;
    while ((result = mdb_cursor_get(cursor, &key, &value, index ? MDB_NEXT : MDB_FIRST)) == MDB_SUCCESS) {
        if (index >= lines->count) fail("verify: more values than events");
        if (lines->length[index] + 1 > buffer_size) {
            buffer_size = lines->length[index] + 1;
            buffer = checked_realloc(buffer, buffer_size);
        }
        size_t size = check_zstd(ZSTD_decompress_usingDDict(context, buffer, buffer_size, value.mv_data,
                                                            value.mv_size, ddict),
                                 "ZSTD_decompress_usingDDict");
        if (size != lines->length[index] || memcmp(buffer, lines->line[index], size) != 0)
            fail("verify: value %zu does not decompress to its input line", index + 1);
        index++;
    }
    if (result != MDB_NOTFOUND) check_lmdb(result, "mdb_cursor_get");
    if (index != lines->count) fail("verify: %zu values for %zu events", index, lines->count);
    free(buffer);
    ZSTD_freeDDict(ddict);
    ZSTD_freeDCtx(context);
    mdb_cursor_close(cursor);
    mdb_txn_abort(txn);
    mdb_env_close(env);
}

int main(int argc, char **argv) {
    program_name = "lmdb_ceiling";
    const char *workload = NULL, *canonical = NULL, *directory = NULL;
    long long repeats = 1, samples = 20000, dict_bytes = 32768, level = 3;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(arg, "--workload") == 0 && value) workload = argv[++i];
        else if (strcmp(arg, "--canonical") == 0 && value) canonical = argv[++i];
        else if (strcmp(arg, "--dir") == 0 && value) directory = argv[++i];
        else if (strcmp(arg, "--repeat") == 0) repeats = parse_count(usage, arg, value, 1, 100), i++;
        else if (strcmp(arg, "--samples") == 0) samples = parse_count(usage, arg, value, 10, 1LL << 30), i++;
        else if (strcmp(arg, "--dict-bytes") == 0)
            dict_bytes = parse_count(usage, arg, value, 1024, 1 << 24), i++;
        else if (strcmp(arg, "--level") == 0)
            level = parse_count(usage, arg, value, ZSTD_minCLevel(), ZSTD_maxCLevel()), i++;
        else if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        } else usage_error(usage, "unknown or incomplete option '%s'", arg);
    }
    if (!(workload || canonical) || !directory)
        usage_error(usage, "--workload (or --canonical) and --dir are required");
    const char *input = canonical ? canonical : workload;
    make_directory(directory);

    struct lines lines = lines_read(input, 0);
    size_t input_bytes = 0;
    for (size_t i = 0; i < lines.count; i++) input_bytes += lines.length[i];
    struct dictionary dictionary = train(&lines, (size_t)samples, (size_t)dict_bytes);

    ZSTD_CDict *cdict = ZSTD_createCDict(dictionary.bytes, dictionary.size, (int)level);
    ZSTD_CCtx *context = ZSTD_createCCtx();
    if (!cdict || !context) fail("ZSTD_createCDict/ZSTD_createCCtx: out of memory");
    check_zstd(ZSTD_CCtx_setParameter(context, ZSTD_c_compressionLevel, (int)level), "ZSTD_CCtx_setParameter");
    check_zstd(ZSTD_CCtx_setParameter(context, ZSTD_c_contentSizeFlag, 1), "ZSTD_CCtx_setParameter");
    check_zstd(ZSTD_CCtx_setParameter(context, ZSTD_c_checksumFlag, 0), "ZSTD_CCtx_setParameter");
    check_zstd(ZSTD_CCtx_setParameter(context, ZSTD_c_dictIDFlag, 0), "ZSTD_CCtx_setParameter");
    // The reference is sticky: every ZSTD_compress2 on this context uses the dictionary.
    check_zstd(ZSTD_CCtx_refCDict(context, cdict), "ZSTD_CCtx_refCDict");

    // Room for every value several times over: the map is virtual, the file grows with use.
    size_t map_size = (input_bytes * 4 + (64u << 20)) & ~(size_t)0xFFFF;
    double rates[100];
    struct run run = {0};
    for (long long round = 0; round < repeats; round++) {
        run = run_once(directory, &lines, context, map_size);
        rates[round] = run.rate;
    }
    verify(directory, &lines, &dictionary, map_size);

    struct report *report = report_new("lmdb_ceiling", workload ? workload : input, lines.count);
    int major, minor, patch;
    report_info(report, "lmdb", mdb_version(&major, &minor, &patch));
    report_info(report, "zstd", ZSTD_versionString());
    report_info(report, "input", canonical ? "canonical JSON" : "workload append inputs (not canonical)");
    report_info(report, "input file", input);
    char text[160];
    snprintf(text, sizeof text, "zstd level %lld, %zu-byte dictionary trained on the first %lld events",
             level, dictionary.size, samples < (long long)lines.count ? samples : (long long)lines.count);
    report_info(report, "compression", text);

    double count = (double)lines.count;
    snprintf(text, sizeof text, "median of %lld; training excluded", repeats);
    report_add(report, "ceiling: bare LMDB + zstd dictionary, 1000 per txn", median(rates, (size_t)repeats),
               "events/s", text);
    snprintf(text, sizeof text, "once, %lld samples, %zu-byte dictionary",
             samples < (long long)lines.count ? samples : (long long)lines.count, dictionary.size);
    report_add(report, "dictionary training", dictionary.training_ms, "ms", text);
    report_add(report, "value per event", (double)run.value_bytes / count, "B", "zstd frame");
    report_add(report, "input JSON per event", (double)input_bytes / count, "B",
               canonical ? "canonical JSON" : "workload line, not canonical");
    report_add(report, "values / input JSON", (double)run.value_bytes / (double)input_bytes * 100, "%", "");
    report_add(report, "data.mdb per event", (double)run.file_bytes / count, "B", "file size");
    report_add(report, "pages in use per event", (double)run.pages_bytes / count, "B",
               "up to the high-water mark");
    report_finish(report);

    ZSTD_freeCCtx(context);
    ZSTD_freeCDict(cdict);
    free(dictionary.bytes);
    lines_free(&lines);
    return 0;
}
