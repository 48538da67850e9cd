/* Compressed fatbin entries: nvcc compresses a fatbin's entries with LZ4 (flag 0x2000; the default of CUDA
 * 12.x toolkits) or zstd (flag 0x8000; CUDA 13's `--compress-mode=size`), and CuPy's and PyTorch's prebuilt
 * kernels ship that way, PTX included. image.c reads the entry's header (the compressed size at byte 16, the
 * uncompressed size at byte 56: cuobjdump's layout, and ZLUDA's dark_api/src/fatbin.rs); the payload is one raw
 * LZ4 block or one zstd frame.
 *
 * Decompression is the system's own liblz4.so.1 / libzstd.so.1, loaded when a compressed entry is first read
 * (both come with every Debian and Ubuntu system: apt and systemd need them), so the fake needs no headers or
 * libraries to build. Without them the load is refused, naming the missing library. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

#define DECOMPRESSED_MAX (1ull << 30) /* an uncompressed size past this is a corrupt header, not a module */

typedef int (*Lz4Decompress)(const char *src, char *dst, int src_size, int dst_capacity);
typedef size_t (*ZstdDecompress)(void *dst, size_t dst_capacity, const void *src, size_t src_size);
typedef unsigned (*ZstdIsError)(size_t code);
typedef const char *(*ZstdErrorName)(size_t code);

static struct {
    Lz4Decompress lz4;
    ZstdDecompress zstd;
    ZstdIsError zstd_is_error;
    ZstdErrorName zstd_error_name;
} g_codecs;
static pthread_once_t g_codecs_once = PTHREAD_ONCE_INIT;

static void codecs_load(void) {
    void *lz4 = dlopen("liblz4.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lz4) g_codecs.lz4 = (Lz4Decompress)dlsym(lz4, "LZ4_decompress_safe");
    void *zstd = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
    if (zstd) {
        g_codecs.zstd = (ZstdDecompress)dlsym(zstd, "ZSTD_decompress");
        g_codecs.zstd_is_error = (ZstdIsError)dlsym(zstd, "ZSTD_isError");
        g_codecs.zstd_error_name = (ZstdErrorName)dlsym(zstd, "ZSTD_getErrorName");
        if (!g_codecs.zstd_is_error || !g_codecs.zstd_error_name) g_codecs.zstd = NULL;
    }
}

CUresult fatbin_decompress(int codec, unsigned arch, const uint8_t *src, uint64_t packed, uint64_t size, uint8_t **out,
                           size_t *n, char *log, size_t loglen) {
    const char *name = codec == FATBIN_LZ4 ? "LZ4" : "zstd";
    if (size == 0 || size > DECOMPRESSED_MAX || packed > INT32_MAX) {
        snprintf(log, loglen, "the fatbin's %s-compressed entry for sm_%u has impossible sizes (%llu bytes packed, "
                 "%llu unpacked)", name, arch, (unsigned long long)packed, (unsigned long long)size);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    pthread_once(&g_codecs_once, codecs_load);
    if (codec == FATBIN_LZ4 ? !g_codecs.lz4 : !g_codecs.zstd) {
        snprintf(log, loglen, "the fatbin's entry for sm_%u is %s-compressed and %s (from %s) cannot be loaded", arch,
                 name, codec == FATBIN_LZ4 ? "liblz4.so.1" : "libzstd.so.1", codec == FATBIN_LZ4 ? "liblz4-1" : "libzstd1");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    uint8_t *buf = malloc(size + 1);
    if (!buf) return CUDA_ERROR_OUT_OF_MEMORY;
    size_t got;
    const char *why = NULL;
    if (codec == FATBIN_LZ4) {
        int r = g_codecs.lz4((const char *)src, (char *)buf, (int)packed, (int)size);
        got = r < 0 ? 0 : (size_t)r;
        if (r < 0) why = "corrupt LZ4 block";
    } else {
        got = g_codecs.zstd(buf, size, src, packed);
        if (g_codecs.zstd_is_error(got)) why = g_codecs.zstd_error_name(got);
    }
    if (!why && got != size) why = "fewer bytes than its header declares";
    if (why) {
        free(buf);
        snprintf(log, loglen, "the fatbin's %s-compressed entry for sm_%u does not decompress: %s", name, arch, why);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    buf[size] = 0;
    *out = buf;
    *n = size;
    return CUDA_SUCCESS;
}
