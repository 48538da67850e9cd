// A tiny nvcc-built program: the CUDA runtime API (cudaMalloc, cudaMemcpy, a <<<>>> launch, a stream and
// events, cudaDeviceSynchronize, cudaDeviceReset). Build with PTX for the fake:
//   nvcc -gencode arch=compute_90,code=compute_90 -o runtime_smoke runtime_smoke.cu
// Prints "runtime smoke: ok" and exits 0, or names the failing call and exits 1.
#include <cstdio>
#include <cuda_runtime.h>

#define CHECK(call)                                                                               \
    do {                                                                                          \
        cudaError_t err_ = (call);                                                                \
        if (err_ != cudaSuccess) {                                                                \
            std::printf("runtime smoke: FAILED %s: %s\n", #call, cudaGetErrorString(err_));     \
            return 1;                                                                             \
        }                                                                                         \
    } while (0)

__global__ void scale(float *y, const float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}

int main() {
    const int n = 1000;
    float host[n], out[n];
    for (int i = 0; i < n; i++) host[i] = (float)i;
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("%d device(s): %s, sm_%d%d\n", count, prop.name, prop.major, prop.minor);
    float *x, *y;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&y, n * sizeof(float)));
    cudaStream_t stream;
    cudaEvent_t start, end;
    CHECK(cudaStreamCreate(&stream));
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&end));
    CHECK(cudaMemcpyAsync(x, host, sizeof host, cudaMemcpyHostToDevice, stream));
    CHECK(cudaEventRecord(start, stream));
    scale<<<(n + 255) / 256, 256, 0, stream>>>(y, x, n);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(end, stream));
    CHECK(cudaMemcpyAsync(out, y, sizeof out, cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, end));
    for (int i = 0; i < n; i++)
        if (out[i] != 2.0f * i + 1.0f) {
            std::printf("runtime smoke: FAILED y[%d] = %g, expected %g\n", i, out[i], 2.0f * i + 1.0f);
            return 1;
        }
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(end));
    CHECK(cudaStreamDestroy(stream));
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaDeviceReset());
    std::printf("kernel %.3f ms\nruntime smoke: ok\n", ms);
    return 0;
}
