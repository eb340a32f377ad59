#ifndef EVSTORE_CCHECKSUM_SHIM_H
#define EVSTORE_CCHECKSUM_SHIM_H
/* CRC-32C with the processor's own instruction (SSE 4.2's crc32, on x86-64): eight bytes a
   cycle where the table-driven form in Swift does about one. Headers only, nothing to link;
   elsewhere, or on a processor without it, evstore_crc32c_hardware() is 0 and the caller
   keeps its tables. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>

/* Whether evstore_crc32c_update may be called: the processor has SSE 4.2. */
static inline int evstore_crc32c_hardware(void) {
    unsigned int eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
    return (ecx & bit_SSE4_2) != 0;
}

/* `crc` carried over `count` bytes, without the initial value or the final XOR. */
__attribute__((target("sse4.2")))
static inline uint32_t evstore_crc32c_update(uint32_t crc, const uint8_t *bytes, size_t count) {
    uint64_t wide = crc;
    while (count >= 8) {
        uint64_t word;
        memcpy(&word, bytes, 8);
        wide = __builtin_ia32_crc32di(wide, word);
        bytes += 8;
        count -= 8;
    }
    uint32_t narrow = (uint32_t)wide;
    while (count > 0) {
        narrow = __builtin_ia32_crc32qi(narrow, *bytes);
        bytes += 1;
        count -= 1;
    }
    return narrow;
}
#else
static inline int evstore_crc32c_hardware(void) { return 0; }

static inline uint32_t evstore_crc32c_update(uint32_t crc, const uint8_t *bytes, size_t count) {
    (void)bytes;
    (void)count;
    return crc;
}
#endif

#endif
