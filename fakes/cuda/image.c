/* What the fake can run from a module image: PTX text, or the PTX a fatbin or an ELF file carries. The
 * simulated device runs PTX only; an image of machine code alone (SASS) is refused with
 * CUDA_ERROR_NO_BINARY_FOR_GPU and a message saying what to give it instead: never pretend to run it.
 *
 * Recognised containers (layouts as cuobjdump shows them):
 * - a fatbin: header {u32 magic 0xBA55ED50, u16 version, u16 header size, u64 size of the entries}, then
 *   entries {u16 kind (1 PTX, 2 ELF), u16, u32 entry header size, u64 payload size, u32, u32, u16 minor,
 *   u16 major, u32 arch, u32, u32, u64 flags, u64, u64 uncompressed size}, each followed by its payload
 *   (LZ4- or zstd-compressed when the flags say so: fatbin_compress.c);
 * - the fatbin wrapper {u32 magic 0x466243B1, u32 version, const void *fatbin, ...} (what host code hands
 *   to cuModuleLoadFatBinary);
 * - an ELF file (a cubin, host object or executable) with a `.nv_fatbin` / `__nv_relfatbin` section (a
 *   fatbin) or a `.nv_debug_ptx_txt` section (PTX text). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake.h"

#define FATBIN_MAGIC 0xBA55ED50u
#define FATBIN_WRAPPER_MAGIC 0x466243B1u
#define FATBIN_KIND_PTX 1
#define FATBIN_FLAG_COMPRESSED_LZ4 0x2000ull
#define FATBIN_FLAG_COMPRESSED_ZSTD 0x8000ull
#define ELF_MACHINE_CUDA 190
#define IMAGE_BYTES_MAX (1ull << 30) /* the largest module file read */
#define NEEDS "the simulated device (sm_90) runs PTX: load PTX text, or a fatbin or cubin that carries PTX " \
              "for compute_90 or older (nvcc -gencode arch=compute_90,code=compute_90; NVRTC to PTX)"

static uint16_t u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t u32(const uint8_t *p) { return (uint32_t)u16(p) | (uint32_t)u16(p + 2) << 16; }
static uint64_t u64(const uint8_t *p) { return (uint64_t)u32(p) | (uint64_t)u32(p + 4) << 32; }

/* Do n bytes at offset off lie inside an image of size bytes? The one bounds test of the image reader: every
 * offset and size a header gives passes it before anything there is read (no sum that could wrap). */
static int within(uint64_t size, uint64_t off, uint64_t n) { return off <= size && n <= size - off; }

static int is_elf(const uint8_t *b) { return b[0] == 0x7F && b[1] == 'E' && b[2] == 'L' && b[3] == 'F'; }

/* A NUL-terminated copy of n bytes of PTX (payloads are padded with NULs, or not terminated at all). */
static char *ptx_copy(const uint8_t *p, size_t n) {
    size_t len = strnlen((const char *)p, n);
    char *text = malloc(len + 1);
    if (text) {
        memcpy(text, p, len);
        text[len] = 0;
    }
    return text;
}

/* The PTX entry of a fatbin for the newest architecture the simulated device has (or, failing that, the
 * oldest, whose load then says why it cannot run).
 *
 * One divergence, taken on purpose (fakes/cuda/README.md, "Newer PTX in place of machine code"): a fatbin
 * whose PTX is all newer than sm_90 but which carries machine code for sm_90 is one a real H200 runs (the
 * machine code); the fake cannot run machine code, so it runs that PTX (*newest_target: its architecture), the
 * same source compiled for the newer target, in its place. Without sm_90 machine code such a fatbin is refused
 * at load, as a real sm_90 refuses it. */
static CUresult fatbin_ptx(const uint8_t *fb, size_t avail, char **out, unsigned *newest_target, char *log,
                           size_t loglen) {
    if (avail < 16 || u32(fb) != FATBIN_MAGIC) {
        snprintf(log, loglen, "not a fatbin: bad header");
        return CUDA_ERROR_INVALID_IMAGE;
    }
    uint64_t first = u16(fb + 6), total = u64(fb + 8);
    if (first < 16 || !within(avail, first, total)) {
        snprintf(log, loglen, "fatbin is truncated (%llu bytes of entries declared)", (unsigned long long)total);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    const uint8_t *end = fb + first + total, *best = NULL, *entry = fb + first;
    unsigned best_arch = 0, elf_arch = 0;
    int runs_on_device = 0; /* machine code for sm_90 (what a real sm_90 would run) */
    while (entry + 64 <= end) {
        uint32_t header = u32(entry + 4);
        uint64_t payload = u64(entry + 8);
        if (header < 64 || !within((uint64_t)(end - entry), header, payload)) {
            snprintf(log, loglen, "fatbin entry at offset %llu lies outside the fatbin",
                     (unsigned long long)(entry - fb));
            return CUDA_ERROR_INVALID_IMAGE;
        }
        unsigned arch = u32(entry + 28);
        if (u16(entry) != FATBIN_KIND_PTX) {
            elf_arch = arch;
            runs_on_device |= arch == SIMULATED_SM;
        } else if (!best || (best_arch > SIMULATED_SM ? arch < best_arch : arch <= SIMULATED_SM && arch > best_arch)) {
            best = entry;
            best_arch = arch;
        }
        entry += header + payload;
    }
    if (best && best_arch > SIMULATED_SM && runs_on_device) *newest_target = best_arch;
    uint64_t flags = best ? u64(best + 40) : 0;
    if (flags & (FATBIN_FLAG_COMPRESSED_LZ4 | FATBIN_FLAG_COMPRESSED_ZSTD)) {
        uint64_t packed = u32(best + 16);
        if (packed > u64(best + 8)) {
            snprintf(log, loglen, "the fatbin's compressed entry for sm_%u is truncated", best_arch);
            return CUDA_ERROR_INVALID_IMAGE;
        }
        uint8_t *text;
        size_t n;
        CUresult rc = fatbin_decompress(flags & FATBIN_FLAG_COMPRESSED_LZ4 ? FATBIN_LZ4 : FATBIN_ZSTD, best_arch,
                                        best + u32(best + 4), packed, u64(best + 56), &text, &n, log, loglen);
        if (rc == CUDA_SUCCESS) {
            *out = ptx_copy(text, n);
            free(text);
            return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
        }
        return rc;
    }
    if (best) {
        *out = ptx_copy(best + u32(best + 4), u64(best + 8));
        return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (elf_arch)
        snprintf(log, loglen, "the fatbin holds only machine code (SASS for sm_%u), no PTX; " NEEDS, elf_arch);
    else
        snprintf(log, loglen, "the fatbin holds no PTX; " NEEDS);
    return CUDA_ERROR_NO_BINARY_FOR_GPU;
}

/* Is the section name at offset at of the section-name table [names, +nsize) the given one (NUL inside the
 * table)? */
static int section_named(const uint8_t *names, uint64_t nsize, uint64_t at, const char *want) {
    size_t n = strlen(want) + 1;
    return within(nsize, at, n) && !memcmp(names + at, want, n);
}

/* PTX from an ELF file's .nv_fatbin / __nv_relfatbin / .nv_debug_ptx_txt section. Every header, name and
 * section is checked to lie inside the avail bytes of the image (for cuModuleLoadData, which gets no size,
 * the section headers say how far it goes). */
static CUresult elf_ptx(const uint8_t *elf, uint64_t avail, char **out, unsigned *newest_target, char *log,
                        size_t loglen) {
    if (avail < 64 || elf[4] != 2 || elf[5] != 1) {
        snprintf(log, loglen, "only 64-bit little-endian ELF images are supported; " NEEDS);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    uint64_t shoff = u64(elf + 0x28);
    unsigned shentsize = u16(elf + 0x3A), shnum = u16(elf + 0x3C), shstrndx = u16(elf + 0x3E);
    if (shentsize < 64 || shstrndx >= shnum) {
        snprintf(log, loglen, "ELF image without section headers; " NEEDS);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    int headers_inside = within(avail, shoff, (uint64_t)shnum * shentsize);
    const uint8_t *strtab = headers_inside ? elf + shoff + (uint64_t)shstrndx * shentsize : NULL;
    uint64_t names_at = strtab ? u64(strtab + 24) : 0, names_size = strtab ? u64(strtab + 32) : 0;
    if (!headers_inside || !within(avail, names_at, names_size)) {
        snprintf(log, loglen, "ELF image whose section headers or names lie outside it (%llu bytes)",
                 (unsigned long long)avail);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    const uint8_t *names = elf + names_at;
    for (unsigned i = 0; i < shnum; i++) {
        const uint8_t *sh = elf + shoff + (uint64_t)i * shentsize;
        uint64_t name = u32(sh), at = u64(sh + 24), size = u64(sh + 32);
        int fatbin = section_named(names, names_size, name, ".nv_fatbin") ||
                     section_named(names, names_size, name, "__nv_relfatbin");
        if (!fatbin && !section_named(names, names_size, name, ".nv_debug_ptx_txt")) continue;
        if (!within(avail, at, size)) {
            snprintf(log, loglen, "ELF section %s lies outside the image", names + name);
            return CUDA_ERROR_INVALID_IMAGE;
        }
        const uint8_t *data = elf + at;
        if (fatbin)
            return fatbin_ptx(data, size, out, newest_target, log, loglen);
        *out = ptx_copy(data, size);
        return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint32_t flags = u32(elf + 0x30); /* the SM: bits 8-15 from ELF ABI version 8 (CUDA 12.8+), else bits 0-7 */
    unsigned arch = elf[8] >= 8 ? (flags >> 8) & 0xFF : flags & 0xFF;
    if (u16(elf + 0x12) == ELF_MACHINE_CUDA)
        snprintf(log, loglen, "the cubin holds only machine code (SASS for sm_%u), no PTX; " NEEDS, arch);
    else
        snprintf(log, loglen, "the ELF image carries no fatbin and no PTX; " NEEDS);
    return CUDA_ERROR_NO_BINARY_FOR_GPU;
}

CUresult image_read(const char *path, char **bytes, size_t *n) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* O_NONBLOCK: a FIFO does not wait for a writer */
    if (fd < 0) return CUDA_ERROR_FILE_NOT_FOUND;
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) { /* a device (/dev/zero), FIFO or directory: no image */
        close(fd);
        fake_log("module file %s is not a regular file", path);
        return CUDA_ERROR_FILE_NOT_FOUND;
    }
    if ((uint64_t)st.st_size > IMAGE_BYTES_MAX) {
        close(fd);
        fake_log("module file %s has %lld bytes, more than the %llu an image may have", path, (long long)st.st_size,
                 IMAGE_BYTES_MAX);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    size_t len = 0, size = (size_t)st.st_size;
    char *buf = malloc(size + 1);
    if (!buf) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (ssize_t got = 1; len < size && got > 0; len += got > 0 ? (size_t)got : 0) /* a file that shrank ends early */
        got = read(fd, buf + len, size - len);
    close(fd);
    buf[len] = 0;
    *bytes = buf;
    *n = len;
    return CUDA_SUCCESS;
}

/* The fatbin or ELF image a fatbin wrapper points to, or NULL with the reason in log. Only a wrapper in memory
 * (no size given) is followed: the pointer it holds means nothing in a file or a sized buffer. */
static const uint8_t *wrapped_image(const uint8_t *wrapper, size_t size, char *log, size_t loglen) {
    const uint8_t *p = NULL;
    if (size == IMAGE_SIZE_UNKNOWN) memcpy(&p, wrapper + 8, sizeof p);
    if (!p)
        snprintf(log, loglen, "a fatbin wrapper points to a fatbin in memory (cuModuleLoadFatBinary); this one %s",
                 size == IMAGE_SIZE_UNKNOWN ? "holds NULL" : "comes from a file or sized buffer: give the fatbin");
    else if (u32(p) != FATBIN_MAGIC && !is_elf(p))
        snprintf(log, loglen, "the fatbin wrapper points to no fatbin or ELF image"), p = NULL;
    return p;
}

CUresult image_ptx(const void *image, size_t size, const char **ptx, char **owned, unsigned *newest_target, char *log,
                   size_t loglen) {
    const uint8_t *b = image;
    unsigned newest = SIMULATED_SM;
    if (!newest_target) newest_target = &newest;
    *newest_target = SIMULATED_SM;
    *owned = NULL;
    *ptx = image;
    if (size != IMAGE_SIZE_UNKNOWN && size < 4) return CUDA_SUCCESS; /* too short for any magic: text, if anything */
    if (u32(b) == FATBIN_WRAPPER_MAGIC) {
        if (!(b = wrapped_image(b, size, log, loglen))) {
            fake_log("module image refused: %s", log);
            return CUDA_ERROR_INVALID_IMAGE;
        }
        size = IMAGE_SIZE_UNKNOWN;
    }
    /* cuModuleLoadData gets no size: then the headers alone say how far the image goes, as on a real driver */
    uint64_t avail = size != IMAGE_SIZE_UNKNOWN ? size : UINTPTR_MAX - (uintptr_t)b;
    CUresult rc;
    if (is_elf(b)) rc = elf_ptx(b, avail, owned, newest_target, log, loglen);
    else if (u32(b) == FATBIN_MAGIC) rc = fatbin_ptx(b, avail, owned, newest_target, log, loglen);
    else return CUDA_SUCCESS; /* PTX text */
    if (rc == CUDA_SUCCESS) *ptx = *owned;
    else fake_log("module image refused: %s", log);
    return rc;
}
