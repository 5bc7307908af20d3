//go:build cgo

package nn

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

// The CBLAS enum values (cblas.h): row-major 101, no-trans 111, trans 112.
typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k,
	float alpha, const float *a, int lda, const float *b, int ldb,
	float beta, float *c, int ldc);

static void *nt_open(const char *name) { return dlopen(name, RTLD_NOW | RTLD_LOCAL); }
static void *nt_sym(void *h, const char *name) { return dlsym(h, name); }
static const char *nt_err(void) { const char *e = dlerror(); return e ? e : "unknown error"; }

typedef void (*set_threads_fn)(int);
typedef int (*get_threads_fn)(void);

static void nt_set_threads(void *fn, int n) { ((set_threads_fn)fn)(n); }
static int nt_get_threads(void *fn) { return ((get_threads_fn)fn)(); }

static void nt_sgemm(void *fn, int ta, int tb, int m, int n, int k,
	float alpha, const float *a, int lda, const float *b, int ldb,
	float beta, float *c, int ldc) {
	((sgemm_fn)fn)(101, ta ? 112 : 111, tb ? 112 : 111, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// openBLASLibs are the shared objects tried in order: Debian's
// libopenblas0 provides the first, libopenblas-dev the second.
var openBLASLibs = []string{"libopenblas.so.0", "libopenblas.so"}

// OpenBLAS is a Backend that calls cblas_sgemm of the system's OpenBLAS,
// loaded at run time with dlopen, so binaries build without its headers
// and pick it with NOMAD_TRAIN_BLAS=openblas where it is installed.
// OpenBLAS runs its own threads: OPENBLAS_NUM_THREADS bounds them, and
// NOMAD_TRAIN_BLAS=openblas:N sets their number for the process.
type OpenBLAS struct {
	sgemm unsafe.Pointer // the C function, valid for the process's life
	// getThreads is openblas_get_num_threads, nil where the library lacks it.
	getThreads unsafe.Pointer
}

var openBLAS struct {
	once                   sync.Once
	fn                     unsafe.Pointer
	setThreads, getThreads unsafe.Pointer // nil where the library lacks them
	err                    error
}

// openOpenBLAS loads the library once per process. threads > 0 sets the
// number of OpenBLAS threads for the whole process (the library has one
// pool); 0 leaves it as the library chose.
func openOpenBLAS(threads int) (Backend, error) {
	openBLAS.once.Do(func() {
		var errs []string
		for _, lib := range openBLASLibs {
			name := C.CString(lib)
			h := C.nt_open(name)
			C.free(unsafe.Pointer(name))
			if h == nil {
				errs = append(errs, C.GoString(C.nt_err()))
				continue
			}
			fn := symbol(h, "cblas_sgemm")
			if fn == nil {
				errs = append(errs, lib+": no cblas_sgemm")
				continue
			}
			openBLAS.fn = fn
			openBLAS.setThreads = symbol(h, "openblas_set_num_threads")
			openBLAS.getThreads = symbol(h, "openblas_get_num_threads")
			return
		}
		openBLAS.err = fmt.Errorf("%w: openblas: cannot load the library (install Debian's libopenblas0 or libopenblas-dev): %v", ErrBackendUnavailable, errs)
	})
	if openBLAS.err != nil {
		return nil, openBLAS.err
	}
	if threads > 0 {
		if openBLAS.setThreads == nil {
			return nil, fmt.Errorf("%w: openblas:%d: this OpenBLAS has no openblas_set_num_threads; set OPENBLAS_NUM_THREADS instead", ErrBackendUnavailable, threads)
		}
		C.nt_set_threads(openBLAS.setThreads, C.int(threads))
	}
	return OpenBLAS{sgemm: openBLAS.fn, getThreads: openBLAS.getThreads}, nil
}

// sym2 looks name up in the library h, nil when it is missing.
func symbol(h unsafe.Pointer, name string) unsafe.Pointer {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	return C.nt_sym(h, cs)
}

// Threads is the number of threads OpenBLAS uses for one product, 0 when
// the library does not say.
func (o OpenBLAS) Threads() int {
	if o.getThreads == nil {
		return 0
	}
	return int(C.nt_get_threads(o.getThreads))
}

// Sgemm implements Backend.
func (o OpenBLAS) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		// C = beta·C: BLAS would not read A or B, which may be empty.
		for i := 0; i < m; i++ {
			row := c[i*ldc : i*ldc+n]
			for j := range row {
				if beta == 0 {
					row[j] = 0
				} else {
					row[j] *= beta
				}
			}
		}
		return
	}
	// The slices must hold the operands as BLAS will read them.
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	if len(a) < (ar-1)*lda+ac || len(b) < (br-1)*ldb+bc || len(c) < (m-1)*ldc+n {
		panic(fmt.Sprintf("nn: openblas sgemm operands too short for %d×%d×%d", m, n, k))
	}
	C.nt_sgemm(o.sgemm, cbool(transA), cbool(transB), C.int(m), C.int(n), C.int(k), C.float(alpha),
		(*C.float)(unsafe.Pointer(&a[0])), C.int(lda), (*C.float)(unsafe.Pointer(&b[0])), C.int(ldb),
		C.float(beta), (*C.float)(unsafe.Pointer(&c[0])), C.int(ldc))
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// String describes the backend for benchmarks and logs.
func (o OpenBLAS) String() string {
	if n := o.Threads(); n > 0 {
		return fmt.Sprintf("openblas(%d)", n)
	}
	return "openblas"
}
