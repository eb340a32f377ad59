// Shared by the baseline programs: failing with a message, the clock, reading NDJSON
// lines, picking the few fields of an append input, and printing the one JSON object of
// figures each program writes to stdout.
#ifndef EVSTORE_BASELINES_COMMON_H
#define EVSTORE_BASELINES_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdnoreturn.h>

// Set by each program's main; prefixes every message.
extern const char *program_name;

// Prints "program: message" to stderr and exits 1.
noreturn void fail(const char *format, ...) __attribute__((format(printf, 1, 2)));
// Prints "program: message" and the usage text to stderr and exits 64.
noreturn void usage_error(const char *usage, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
void *checked_malloc(size_t size);
void *checked_realloc(void *pointer, size_t size);
char *checked_strdup(const char *text);

// Seconds on the monotonic clock.
double now_seconds(void);
// Milliseconds since the Unix epoch (wall clock).
long long now_unix_ms(void);

// Parses a whole decimal number in [minimum, maximum] for `flag`, or exits 64.
long long parse_count(const char *usage, const char *flag, const char *text, long long minimum,
                      long long maximum);

// A file read whole, split into lines. Each line is NUL-terminated in place (its '\n'
// replaced), so it can be handed to C APIs as is; empty lines are skipped.
struct lines {
    char *data;
    size_t count;
    char **line;
    size_t *length;
};
// Reads at most `limit` lines (0: all) of `path`.
struct lines lines_read(const char *path, size_t limit);
void lines_free(struct lines *lines);

// A slice of a line.
struct span {
    const char *start;
    size_t length;
};

// The fields of an append input that the baselines act on. Each span is the raw JSON
// text of the value (strings with their quotes), or empty when the key is absent.
struct input_event {
    struct span entity, kind, status, set, element, fields;
};
// Scans one JSON object's top-level keys. Returns false when the text is not an object
// this scanner can read (it checks structure, not every detail of the grammar).
bool input_event_parse(const char *text, size_t length, struct input_event *event);
// True for a JSON string span.
bool span_is_string(struct span span);
// The decoded text of a JSON string span (escapes resolved) into a new NUL-terminated
// buffer; for any other value, a copy of its JSON text. Exits on malformed escapes.
char *span_text(struct span span);
bool span_equals(struct span span, const char *text);

// The one JSON object a program prints:
// {"program":..., "workload":..., "events":N, "info":{...}, "results":[{"name","value","unit","note"}]}
struct report;
struct report *report_new(const char *program, const char *workload, size_t events);
// `info` holds strings: library versions, settings, notes on the method.
void report_info(struct report *report, const char *key, const char *value);
void report_add(struct report *report, const char *name, double value, const char *unit,
                const char *note);
// Prints the object to stdout and a readable table to stderr, then frees the report.
void report_finish(struct report *report);

double median(double *values, size_t count);
// The value at quantile q of sorted values, chosen as evstore-socket-bench does:
// sorted[min(count - 1, floor(count * q))].
double quantile_sorted(const double *sorted, size_t count, double q);
int compare_doubles(const void *a, const void *b);

// Size of a file in bytes, 0 when it does not exist.
long long file_size(const char *path);
// Joins a directory and a name into a new string.
char *path_join(const char *directory, const char *name);
// Creates a directory (and its parents) when missing, or exits.
void make_directory(const char *path);

#endif
