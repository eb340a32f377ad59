#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

const char *program_name = "baseline";

static void vmessage(const char *format, va_list arguments) {
    fprintf(stderr, "%s: ", program_name);
    vfprintf(stderr, format, arguments);
    fputc('\n', stderr);
}

noreturn void fail(const char *format, ...) {
    va_list arguments;
    va_start(arguments, format);
    vmessage(format, arguments);
    va_end(arguments);
    exit(1);
}

noreturn void usage_error(const char *usage, const char *format, ...) {
    va_list arguments;
    va_start(arguments, format);
    vmessage(format, arguments);
    va_end(arguments);
    fputs(usage, stderr);
    exit(64);
}

void *checked_malloc(size_t size) {
    void *pointer = malloc(size ? size : 1);
    if (!pointer) fail("out of memory (%zu bytes)", size);
    return pointer;
}

void *checked_realloc(void *pointer, size_t size) {
    void *resized = realloc(pointer, size ? size : 1);
    if (!resized) fail("out of memory (%zu bytes)", size);
    return resized;
}

char *checked_strdup(const char *text) {
    size_t length = strlen(text);
    char *copy = checked_malloc(length + 1);
    memcpy(copy, text, length + 1);
    return copy;
}

double now_seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

long long now_unix_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

long long parse_count(const char *usage, const char *flag, const char *text, long long minimum,
                      long long maximum) {
    if (!text) usage_error(usage, "%s needs a value", flag);
    char *end = NULL;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (errno || end == text || *end || value < minimum || value > maximum)
        usage_error(usage, "%s must be a whole number from %lld to %lld, not '%s'", flag, minimum,
                    maximum, text);
    return value;
}

// MARK: Lines

struct lines lines_read(const char *path, size_t limit) {
    FILE *file = fopen(path, "rb");
    if (!file) fail("cannot open %s: %s", path, strerror(errno));
    struct stat status;
    if (fstat(fileno(file), &status) != 0) fail("cannot stat %s: %s", path, strerror(errno));
    size_t size = (size_t)status.st_size;
    struct lines lines = {0};
    lines.data = checked_malloc(size + 1);
    if (size && fread(lines.data, 1, size, file) != size)
        fail("cannot read %s: %s", path, ferror(file) ? strerror(errno) : "short read");
    fclose(file);
    lines.data[size] = '\n';  // a sentinel: the last line ends like every other

    size_t capacity = 1024;
    lines.line = checked_malloc(capacity * sizeof *lines.line);
    lines.length = checked_malloc(capacity * sizeof *lines.length);
    char *cursor = lines.data, *end = lines.data + size;
    while (cursor < end && (limit == 0 || lines.count < limit)) {
        char *newline = memchr(cursor, '\n', (size_t)(end + 1 - cursor));
        size_t length = (size_t)(newline - cursor);
        if (length && cursor[length - 1] == '\r') length--;
        cursor[length] = '\0';
        if (length) {
            if (lines.count == capacity) {
                capacity *= 2;
                lines.line = checked_realloc(lines.line, capacity * sizeof *lines.line);
                lines.length = checked_realloc(lines.length, capacity * sizeof *lines.length);
            }
            lines.line[lines.count] = cursor;
            lines.length[lines.count] = length;
            lines.count++;
        }
        cursor = newline + 1;
    }
    if (lines.count == 0) fail("%s holds no lines", path);
    return lines;
}

void lines_free(struct lines *lines) {
    free(lines->data);
    free(lines->line);
    free(lines->length);
    *lines = (struct lines){0};
}

// MARK: JSON scanning

static const char *skip_space(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

// Returns the end of the string starting at p (just past its closing quote), or NULL.
static const char *skip_string(const char *p, const char *end) {
    for (p++; p < end; p++) {
        if (*p == '\\') p++;
        else if (*p == '"') return p + 1;
    }
    return NULL;
}

// Returns the end of the value starting at p, or NULL.
static const char *skip_value(const char *p, const char *end) {
    if (p >= end) return NULL;
    if (*p == '"') return skip_string(p, end);
    if (*p == '{' || *p == '[') {
        int depth = 0;
        while (p < end) {
            if (*p == '"') {
                p = skip_string(p, end);
                if (!p) return NULL;
                continue;
            }
            if (*p == '{' || *p == '[') depth++;
            else if (*p == '}' || *p == ']') {
                if (--depth == 0) return p + 1;
            }
            p++;
        }
        return NULL;
    }
    const char *start = p;
    while (p < end && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\t' &&
           *p != '\n' && *p != '\r')
        p++;
    return p > start ? p : NULL;
}

static bool key_is(const char *key, size_t length, const char *name) {
    return strlen(name) == length && memcmp(key, name, length) == 0;
}

bool input_event_parse(const char *text, size_t length, struct input_event *event) {
    *event = (struct input_event){0};
    const char *p = text, *end = text + length;
    p = skip_space(p, end);
    if (p >= end || *p != '{') return false;
    p = skip_space(p + 1, end);
    if (p < end && *p == '}') return true;
    for (;;) {
        if (p >= end || *p != '"') return false;
        const char *key_end = skip_string(p, end);
        if (!key_end) return false;
        const char *key = p + 1;
        size_t key_length = (size_t)(key_end - 1 - key);
        p = skip_space(key_end, end);
        if (p >= end || *p != ':') return false;
        p = skip_space(p + 1, end);
        const char *value_end = skip_value(p, end);
        if (!value_end) return false;
        struct span value = {p, (size_t)(value_end - p)};
        if (key_is(key, key_length, "entity")) event->entity = value;
        else if (key_is(key, key_length, "kind")) event->kind = value;
        else if (key_is(key, key_length, "status")) event->status = value;
        else if (key_is(key, key_length, "set")) event->set = value;
        else if (key_is(key, key_length, "element")) event->element = value;
        else if (key_is(key, key_length, "fields")) event->fields = value;
        p = skip_space(value_end, end);
        if (p < end && *p == ',') {
            p = skip_space(p + 1, end);
            continue;
        }
        if (p < end && *p == '}') return skip_space(p + 1, end) == end;
        return false;
    }
}

bool span_is_string(struct span span) {
    return span.length >= 2 && span.start[0] == '"';
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static uint32_t read_hex4(const char *p, const char *end) {
    if (end - p < 4) fail("malformed \\u escape in a JSON string");
    uint32_t value = 0;
    for (int i = 0; i < 4; i++) {
        int digit = hex_digit(p[i]);
        if (digit < 0) fail("malformed \\u escape in a JSON string");
        value = value << 4 | (uint32_t)digit;
    }
    return value;
}

static char *put_utf8(char *out, uint32_t code) {
    if (code < 0x80) {
        *out++ = (char)code;
    } else if (code < 0x800) {
        *out++ = (char)(0xC0 | code >> 6);
        *out++ = (char)(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
        *out++ = (char)(0xE0 | code >> 12);
        *out++ = (char)(0x80 | (code >> 6 & 0x3F));
        *out++ = (char)(0x80 | (code & 0x3F));
    } else {
        *out++ = (char)(0xF0 | code >> 18);
        *out++ = (char)(0x80 | (code >> 12 & 0x3F));
        *out++ = (char)(0x80 | (code >> 6 & 0x3F));
        *out++ = (char)(0x80 | (code & 0x3F));
    }
    return out;
}

char *span_text(struct span span) {
    if (!span_is_string(span)) {
        char *copy = checked_malloc(span.length + 1);
        memcpy(copy, span.start, span.length);
        copy[span.length] = '\0';
        return copy;
    }
    // Decoding never makes a string longer than its escaped form.
    const char *p = span.start + 1, *end = span.start + span.length - 1;
    char *text = checked_malloc(span.length), *out = text;
    while (p < end) {
        if (*p != '\\') {
            *out++ = *p++;
            continue;
        }
        if (++p >= end) fail("malformed escape in a JSON string");
        char c = *p++;
        switch (c) {
        case '"': *out++ = '"'; break;
        case '\\': *out++ = '\\'; break;
        case '/': *out++ = '/'; break;
        case 'b': *out++ = '\b'; break;
        case 'f': *out++ = '\f'; break;
        case 'n': *out++ = '\n'; break;
        case 'r': *out++ = '\r'; break;
        case 't': *out++ = '\t'; break;
        case 'u': {
            uint32_t code = read_hex4(p, end);
            p += 4;
            if (code >= 0xD800 && code < 0xDC00 && end - p >= 6 && p[0] == '\\' && p[1] == 'u') {
                uint32_t low = read_hex4(p + 2, end);
                if (low >= 0xDC00 && low < 0xE000) {
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                    p += 6;
                }
            }
            out = put_utf8(out, code);
            break;
        }
        default: fail("malformed escape \\%c in a JSON string", c);
        }
    }
    *out = '\0';
    return text;
}

bool span_equals(struct span span, const char *text) {
    // Compares a string span's raw contents: fine for the plain ASCII kinds and keys
    // compared here, which never need escapes.
    size_t length = strlen(text);
    return span_is_string(span) && span.length == length + 2 &&
           memcmp(span.start + 1, text, length) == 0;
}

// MARK: Report

struct report_row {
    char *name, *unit, *note;
    double value;
};

struct report_info_pair {
    char *key, *value;
};

struct report {
    char *program, *workload;
    size_t events;
    struct report_row *rows;
    size_t row_count;
    struct report_info_pair *info;
    size_t info_count;
};

struct report *report_new(const char *program, const char *workload, size_t events) {
    struct report *report = checked_malloc(sizeof *report);
    *report = (struct report){.program = checked_strdup(program),
                              .workload = checked_strdup(workload),
                              .events = events};
    return report;
}

void report_info(struct report *report, const char *key, const char *value) {
    report->info =
        checked_realloc(report->info, (report->info_count + 1) * sizeof *report->info);
    report->info[report->info_count++] =
        (struct report_info_pair){checked_strdup(key), checked_strdup(value)};
}

void report_add(struct report *report, const char *name, double value, const char *unit,
                const char *note) {
    report->rows = checked_realloc(report->rows, (report->row_count + 1) * sizeof *report->rows);
    report->rows[report->row_count++] = (struct report_row){
        checked_strdup(name), checked_strdup(unit), checked_strdup(note ? note : ""), value};
    // Progress for whoever watches: the figures also go to stderr as they come.
    fprintf(stderr, "%s: %s: %.6g %s%s%s\n", program_name, name, value, unit,
            note && *note ? "  " : "", note ? note : "");
}

static void write_string(const char *text) {
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        if (*p == '"' || *p == '\\') printf("\\%c", *p);
        else if (*p == '\n') fputs("\\n", stdout);
        else if (*p < 0x20) printf("\\u%04x", *p);
        else putchar(*p);
    }
    putchar('"');
}

static void write_number(double value) {
    if (isfinite(value)) printf("%.10g", value);
    else fputs("null", stdout);
}

void report_finish(struct report *report) {
    fputs("{\n  \"program\": ", stdout);
    write_string(report->program);
    fputs(",\n  \"workload\": ", stdout);
    write_string(report->workload);
    printf(",\n  \"events\": %zu,\n  \"info\": {", report->events);
    for (size_t i = 0; i < report->info_count; i++) {
        fputs(i ? ",\n    " : "\n    ", stdout);
        write_string(report->info[i].key);
        fputs(": ", stdout);
        write_string(report->info[i].value);
        free(report->info[i].key);
        free(report->info[i].value);
    }
    fputs(report->info_count ? "\n  },\n  \"results\": [" : "},\n  \"results\": [", stdout);
    for (size_t i = 0; i < report->row_count; i++) {
        struct report_row *row = &report->rows[i];
        fputs(i ? ",\n    {\"name\": " : "\n    {\"name\": ", stdout);
        write_string(row->name);
        fputs(", \"value\": ", stdout);
        write_number(row->value);
        fputs(", \"unit\": ", stdout);
        write_string(row->unit);
        fputs(", \"note\": ", stdout);
        write_string(row->note);
        putchar('}');
        free(row->name);
        free(row->unit);
        free(row->note);
    }
    fputs(report->row_count ? "\n  ]\n}\n" : "]\n}\n", stdout);
    if (fflush(stdout) != 0) fail("cannot write the results to stdout: %s", strerror(errno));
    free(report->rows);
    free(report->info);
    free(report->program);
    free(report->workload);
    free(report);
}

// MARK: Statistics and files

int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double median(double *values, size_t count) {
    if (count == 0) return NAN;
    qsort(values, count, sizeof *values, compare_doubles);
    return count % 2 ? values[count / 2] : (values[count / 2 - 1] + values[count / 2]) / 2;
}

double quantile_sorted(const double *sorted, size_t count, double q) {
    if (count == 0) return NAN;
    size_t index = (size_t)((double)count * q);
    return sorted[index < count ? index : count - 1];
}

long long file_size(const char *path) {
    struct stat status;
    if (stat(path, &status) != 0) {
        if (errno == ENOENT) return 0;
        fail("cannot stat %s: %s", path, strerror(errno));
    }
    return (long long)status.st_size;
}

char *path_join(const char *directory, const char *name) {
    size_t a = strlen(directory), b = strlen(name);
    char *path = checked_malloc(a + b + 2);
    memcpy(path, directory, a);
    path[a] = '/';
    memcpy(path + a + 1, name, b + 1);
    return path;
}

void make_directory(const char *path) {
    char *copy = checked_strdup(path);
    for (char *p = copy + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(copy, 0755) != 0 && errno != EEXIST)
            fail("cannot create %s: %s", copy, strerror(errno));
        *p = '/';
    }
    if (mkdir(copy, 0755) != 0 && errno != EEXIST)
        fail("cannot create %s: %s", copy, strerror(errno));
    free(copy);
}
