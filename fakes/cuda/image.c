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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

#define FATBIN_MAGIC 0xBA55ED50u
#define FATBIN_WRAPPER_MAGIC 0x466243B1u
#define FATBIN_KIND_PTX 1
#define FATBIN_FLAG_COMPRESSED_LZ4 0x2000ull
#define FATBIN_FLAG_COMPRESSED_ZSTD 0x8000ull
#define ELF_MACHINE_CUDA 190
#define SIMULATED_SM 90
#define NEEDS "the simulated device (sm_90) runs PTX: load PTX text, or a fatbin or cubin that carries PTX " \
              "for compute_90 or older (nvcc -gencode arch=compute_90,code=compute_90; NVRTC to PTX)"

static uint16_t u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t u32(const uint8_t *p) { return (uint32_t)u16(p) | (uint32_t)u16(p + 2) << 16; }
static uint64_t u64(const uint8_t *p) { return (uint64_t)u32(p) | (uint64_t)u32(p + 4) << 32; }

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
 * oldest, whose load then says why it cannot run). */
static CUresult fatbin_ptx(const uint8_t *fb, size_t avail, char **out, char *log, size_t loglen) {
    if (avail < 16 || u32(fb) != FATBIN_MAGIC) {
        snprintf(log, loglen, "not a fatbin: bad header");
        return CUDA_ERROR_INVALID_IMAGE;
    }
    uint64_t first = u16(fb + 6), total = u64(fb + 8);
    if (first < 16 || first + total > avail) {
        snprintf(log, loglen, "fatbin is truncated (%llu bytes of entries declared)", (unsigned long long)total);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    const uint8_t *end = fb + first + total, *best = NULL, *entry = fb + first;
    unsigned best_arch = 0, elf_arch = 0;
    while (entry + 64 <= end) {
        uint32_t header = u32(entry + 4);
        uint64_t payload = u64(entry + 8);
        if (header < 64 || payload > (uint64_t)(end - entry) - header) break;
        unsigned arch = u32(entry + 28);
        if (u16(entry) != FATBIN_KIND_PTX) {
            elf_arch = arch;
        } else if (!best || (best_arch > SIMULATED_SM ? arch < best_arch : arch <= SIMULATED_SM && arch > best_arch)) {
            best = entry;
            best_arch = arch;
        }
        entry += header + payload;
    }
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

/* PTX from an ELF file's .nv_fatbin / __nv_relfatbin / .nv_debug_ptx_txt section. Its size is known from
 * its section headers (cuModuleLoadData gets no size). */
static CUresult elf_ptx(const uint8_t *elf, char **out, char *log, size_t loglen) {
    if (elf[4] != 2 || elf[5] != 1) {
        snprintf(log, loglen, "only 64-bit little-endian ELF images are supported; " NEEDS);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    uint64_t shoff = u64(elf + 0x28);
    unsigned shentsize = u16(elf + 0x3A), shnum = u16(elf + 0x3C), shstrndx = u16(elf + 0x3E);
    if (shentsize < 64 || shstrndx >= shnum) {
        snprintf(log, loglen, "ELF image without section headers; " NEEDS);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    const uint8_t *names = elf + u64(elf + shoff + (uint64_t)shstrndx * shentsize + 24);
    for (unsigned i = 0; i < shnum; i++) {
        const uint8_t *sh = elf + shoff + (uint64_t)i * shentsize;
        const char *name = (const char *)names + u32(sh);
        const uint8_t *data = elf + u64(sh + 24);
        uint64_t size = u64(sh + 32);
        if (!strcmp(name, ".nv_fatbin") || !strcmp(name, "__nv_relfatbin"))
            return fatbin_ptx(data, size, out, log, loglen);
        if (!strcmp(name, ".nv_debug_ptx_txt")) {
            *out = ptx_copy(data, size);
            return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    uint32_t flags = u32(elf + 0x30);
    unsigned arch = (flags >> 8) & 0xFF ? (flags >> 8) & 0xFF : flags & 0xFF;
    if (u16(elf + 0x12) == ELF_MACHINE_CUDA)
        snprintf(log, loglen, "the cubin holds only machine code (SASS for sm_%u), no PTX; " NEEDS, arch);
    else
        snprintf(log, loglen, "the ELF image carries no fatbin and no PTX; " NEEDS);
    return CUDA_ERROR_NO_BINARY_FOR_GPU;
}

CUresult image_read(const char *path, char **bytes, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return CUDA_ERROR_FILE_NOT_FOUND;
    char *buf = NULL;
    size_t len = 0, cap = 0, got;
    do { /* to the end: the size of a pipe or special file is not known in advance */
        if (len == cap) {
            char *grown = realloc(buf, (cap = cap ? cap * 2 : 1 << 16) + 1);
            if (!grown) {
                free(buf);
                fclose(f);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            buf = grown;
        }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
    } while (got);
    fclose(f);
    buf[len] = 0;
    *bytes = buf;
    *n = len;
    return CUDA_SUCCESS;
}

CUresult image_ptx(const void *image, const char **ptx, char **owned, char *log, size_t loglen) {
    const uint8_t *b = image;
    *owned = NULL;
    if (u32(b) == FATBIN_WRAPPER_MAGIC) b = *(const uint8_t *const *)(b + 8);
    CUresult rc;
    if (b[0] == 0x7F && b[1] == 'E' && b[2] == 'L' && b[3] == 'F') rc = elf_ptx(b, owned, log, loglen);
    else if (u32(b) == FATBIN_MAGIC) rc = fatbin_ptx(b, SIZE_MAX - (uintptr_t)b, owned, log, loglen);
    else {
        *ptx = image; /* PTX text */
        return CUDA_SUCCESS;
    }
    if (rc == CUDA_SUCCESS) *ptx = *owned;
    else fake_log("module image refused: %s", log);
    return rc;
}
