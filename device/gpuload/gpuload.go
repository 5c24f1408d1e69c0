// Package gpuload keeps one GPU busy for a while without the CUDA toolkit: it opens the
// NVIDIA driver's own libcuda.so.1 at run time (dlopen; nothing is linked against CUDA) and
// fills a buffer of device memory with cuMemsetD32 over and over, which drives the memory
// system and the GPU's power draw well above idle. The real-GPU check (make gpu-check) uses it
// to see the power reading and the energy counter move under load.
package gpuload

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <time.h>
#include <stdlib.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

static CUresult run_load(const char *bus_id, double seconds, size_t bytes, double *passes) {
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) return -1;
	CUresult (*cuInit)(unsigned) = dlsym(lib, "cuInit");
	CUresult (*cuDeviceGetByPCIBusId)(CUdevice *, const char *) = dlsym(lib, "cuDeviceGetByPCIBusId");
	CUresult (*cuCtxCreate)(CUcontext *, unsigned, CUdevice) = dlsym(lib, "cuCtxCreate_v2");
	CUresult (*cuCtxDestroy)(CUcontext) = dlsym(lib, "cuCtxDestroy_v2");
	CUresult (*cuMemAlloc)(CUdeviceptr *, size_t) = dlsym(lib, "cuMemAlloc_v2");
	CUresult (*cuMemFree)(CUdeviceptr) = dlsym(lib, "cuMemFree_v2");
	CUresult (*cuMemsetD32)(CUdeviceptr, unsigned, size_t) = dlsym(lib, "cuMemsetD32_v2");
	CUresult (*cuCtxSynchronize)(void) = dlsym(lib, "cuCtxSynchronize");
	if (!cuInit || !cuDeviceGetByPCIBusId || !cuCtxCreate || !cuCtxDestroy || !cuMemAlloc || !cuMemFree || !cuMemsetD32 || !cuCtxSynchronize) {
		dlclose(lib);
		return -2;
	}
	CUresult r = cuInit(0);
	CUdevice dev;
	CUcontext ctx = 0;
	CUdeviceptr buf = 0;
	if (r == 0) r = cuDeviceGetByPCIBusId(&dev, bus_id);
	if (r == 0) r = cuCtxCreate(&ctx, 0, dev);
	if (r == 0) r = cuMemAlloc(&buf, bytes);
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	unsigned v = 0;
	*passes = 0;
	while (r == 0) {
		for (int i = 0; i < 16 && r == 0; i++) r = cuMemsetD32(buf, v++, bytes / 4);
		if (r == 0) r = cuCtxSynchronize();
		*passes += 16;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 >= seconds) break;
	}
	if (buf) cuMemFree(buf);
	if (ctx) cuCtxDestroy(ctx);
	dlclose(lib);
	return r;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"time"
	"unsafe"
)

// ErrNoDriver is returned where libcuda.so.1 (the NVIDIA driver's CUDA library) is missing.
var ErrNoDriver = errors.New("libcuda.so.1 not found: no NVIDIA driver to run a GPU load with")

// Run loads the GPU at PCI bus ID busID ("0000:3b:00.0") for d, filling a buffer of bytes of
// its memory, and returns how many buffer fills it did. It blocks for d.
func Run(busID string, d time.Duration, bytes int) (passes float64, err error) {
	// A CUDA context is current on one OS thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cs := C.CString(busID)
	defer C.free(unsafe.Pointer(cs))
	var p C.double
	r := C.run_load(cs, C.double(d.Seconds()), C.size_t(bytes), &p)
	switch {
	case r == -1:
		return 0, ErrNoDriver
	case r == -2:
		return 0, errors.New("libcuda.so.1 lacks the driver API entry points the load needs (cuMemsetD32_v2 ...)")
	case r != 0:
		return float64(p), fmt.Errorf("CUDA driver error %d loading GPU %s (see cuda.h CUresult)", int(r), busID)
	}
	return float64(p), nil
}
