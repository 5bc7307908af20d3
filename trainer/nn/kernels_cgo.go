//go:build cgo && amd64

package nn

/*
#cgo CFLAGS: -O3
#cgo LDFLAGS: -lm
#include <stddef.h>
#include <math.h>
#include <immintrin.h>

// The C kernels do exactly the float32 operations of kernels.go in the
// same order, several lanes at a time. Nothing is contracted into a fused
// multiply-add (GCC contracts only where the target has FMA, and neither
// target here has it) and vector sqrt and division round exactly as scalar
// ones do, so the results equal the Go loops' bit for bit.
//
// Adam's square root is written with intrinsics because GCC does not
// vectorise sqrtf while errno is in force (cgo refuses -fno-math-errno);
// the SGD loops vectorise on their own. Each has an AVX version, picked at
// run time, and a baseline SSE2 one.

#define NT_ADAM_SCALAR(i) do { \
	float gi = g[i] + wd * p[i]; \
	float mi = b1 * m[i] + ob1 * gi; \
	float vi = b2 * v[i] + ob2 * gi * gi; \
	m[i] = mi; \
	v[i] = vi; \
	p[i] -= step * mi / (_mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(vi))) * invbc2 + eps); \
} while (0)

#define NT_ADAM_ARGS float *restrict p, const float *restrict g, float *restrict m, float *restrict v, ptrdiff_t n, \
	float b1, float ob1, float b2, float ob2, float wd, float step, float invbc2, float eps

// NT_ADAM_VEC defines NAME, the update LANES floats at a time with the
// vector type T and the intrinsics _mm<W>_*; then the scalar tail.
#define NT_ADAM_VEC(NAME, ATTR, T, W, LANES) ATTR static void NAME(NT_ADAM_ARGS) { \
	T B1 = _mm##W##_set1_ps(b1), OB1 = _mm##W##_set1_ps(ob1), B2 = _mm##W##_set1_ps(b2), OB2 = _mm##W##_set1_ps(ob2); \
	T WD = _mm##W##_set1_ps(wd), STEP = _mm##W##_set1_ps(step), INV = _mm##W##_set1_ps(invbc2), EPS = _mm##W##_set1_ps(eps); \
	ptrdiff_t i = 0; \
	for (; i + LANES <= n; i += LANES) { \
		T P = _mm##W##_loadu_ps(p + i); \
		T G = _mm##W##_add_ps(_mm##W##_loadu_ps(g + i), _mm##W##_mul_ps(WD, P)); \
		T M = _mm##W##_add_ps(_mm##W##_mul_ps(B1, _mm##W##_loadu_ps(m + i)), _mm##W##_mul_ps(OB1, G)); \
		T V = _mm##W##_add_ps(_mm##W##_mul_ps(B2, _mm##W##_loadu_ps(v + i)), _mm##W##_mul_ps(_mm##W##_mul_ps(OB2, G), G)); \
		_mm##W##_storeu_ps(m + i, M); \
		_mm##W##_storeu_ps(v + i, V); \
		T D = _mm##W##_add_ps(_mm##W##_mul_ps(_mm##W##_sqrt_ps(V), INV), EPS); \
		_mm##W##_storeu_ps(p + i, _mm##W##_sub_ps(P, _mm##W##_div_ps(_mm##W##_mul_ps(STEP, M), D))); \
	} \
	for (; i < n; i++) NT_ADAM_SCALAR(i); \
}

NT_ADAM_VEC(nt_adam_avx, __attribute__((target("avx"))), __m256, 256, 8)
NT_ADAM_VEC(nt_adam_sse, , __m128, , 4)

// nt_adam runs the AVX kernel where the CPU has AVX, unless baseline asks
// for the SSE2 one (for tests).
static void nt_adam(int baseline, NT_ADAM_ARGS) {
	if (!baseline && __builtin_cpu_supports("avx")) {
		nt_adam_avx(p, g, m, v, n, b1, ob1, b2, ob2, wd, step, invbc2, eps);
	} else {
		nt_adam_sse(p, g, m, v, n, b1, ob1, b2, ob2, wd, step, invbc2, eps);
	}
}

__attribute__((target_clones("avx", "default")))
static void nt_sgd(float *restrict p, const float *restrict g, ptrdiff_t n, float lr, float wd) {
	for (ptrdiff_t i = 0; i < n; i++) {
		p[i] -= lr * (g[i] + wd * p[i]);
	}
}

__attribute__((target_clones("avx", "default")))
static void nt_sgd_momentum(float *restrict p, const float *restrict g, float *restrict v, ptrdiff_t n,
	float lr, float mu, float wd) {
	for (ptrdiff_t i = 0; i < n; i++) {
		float vi = mu * v[i] + g[i] + wd * p[i];
		v[i] = vi;
		p[i] -= lr * vi;
	}
}

__attribute__((target_clones("avx", "default")))
static void nt_sgd_nesterov(float *restrict p, const float *restrict g, float *restrict v, ptrdiff_t n,
	float lr, float mu, float wd) {
	for (ptrdiff_t i = 0; i < n; i++) {
		float gi = g[i] + wd * p[i];
		float vi = mu * v[i] + gi;
		v[i] = vi;
		p[i] -= lr * (gi + mu * vi);
	}
}

// ReLU and its gradient, written as the Go loops of kernels.go (v <= 0 is
// false for NaN, which passes through); GCC turns the selects into
// compare-and-mask vector code, where the Go loop's branch mispredicts on
// about half of the activations.
__attribute__((target_clones("avx", "default")))
static void nt_relu(float *restrict out, const float *restrict x, ptrdiff_t n) {
	for (ptrdiff_t i = 0; i < n; i++) {
		float v = x[i];
		out[i] = v <= 0.0f ? 0.0f : v;
	}
}

__attribute__((target_clones("avx", "default")))
static void nt_relu_grad(float *restrict dx, const float *restrict y, const float *restrict g, ptrdiff_t n) {
	for (ptrdiff_t i = 0; i < n; i++) {
		dx[i] = y[i] <= 0.0f ? 0.0f : g[i];
	}
}
*/
import "C"

// cgoMinLen is the length below which a Go loop beats the cost of a cgo call.
const cgoMinLen = 256

func fptr(s []float32) *C.float { return (*C.float)(&s[0]) }

// adamUpdate applies adamGo's update with the vectorised C kernel.
func adamUpdate(p, g, m, v []float32, c adamCoef) {
	n := len(p)
	if n < cgoMinLen {
		adamGo(p, g, m, v, c)
		return
	}
	cAdam(false, p, g, m, v, c)
}

// sgdUpdate applies sgdGo's update with the vectorised C kernel.
func sgdUpdate(p, g []float32, lr, wd float32) {
	n := len(p)
	if n < cgoMinLen {
		sgdGo(p, g, lr, wd)
		return
	}
	g = g[:n]
	C.nt_sgd(fptr(p), fptr(g), C.ptrdiff_t(n), C.float(lr), C.float(wd))
}

// sgdMomentumUpdate applies sgdMomentumGo's update with a vectorised C kernel.
func sgdMomentumUpdate(p, g, v []float32, lr, mu, wd float32, nesterov bool) {
	n := len(p)
	if n < cgoMinLen {
		sgdMomentumGo(p, g, v, lr, mu, wd, nesterov)
		return
	}
	g, v = g[:n], v[:n]
	if nesterov {
		C.nt_sgd_nesterov(fptr(p), fptr(g), fptr(v), C.ptrdiff_t(n), C.float(lr), C.float(mu), C.float(wd))
		return
	}
	C.nt_sgd_momentum(fptr(p), fptr(g), fptr(v), C.ptrdiff_t(n), C.float(lr), C.float(mu), C.float(wd))
}

// reluForward sets out to reluGo's result with the vectorised C kernel.
func reluForward(out, x []float32) {
	n := len(x)
	if n < cgoMinLen {
		reluGo(out, x)
		return
	}
	out = out[:n]
	C.nt_relu(fptr(out), fptr(x), C.ptrdiff_t(n))
}

// reluBackward sets dx to reluGradGo's result with the vectorised C kernel.
func reluBackward(dx, y, g []float32) {
	n := len(g)
	if n < cgoMinLen {
		reluGradGo(dx, y, g)
		return
	}
	dx, y = dx[:n], y[:n]
	C.nt_relu_grad(fptr(dx), fptr(y), fptr(g), C.ptrdiff_t(n))
}

// adamSSE runs the baseline SSE2 Adam kernel whatever the CPU has, so tests
// cover it on machines where adamUpdate picks AVX.
func adamSSE(p, g, m, v []float32, c adamCoef) {
	cAdam(true, p, g, m, v, c)
}

func cAdam(baseline bool, p, g, m, v []float32, c adamCoef) {
	n := len(p)
	g, m, v = g[:n], m[:n], v[:n]
	C.nt_adam(cbool(baseline), fptr(p), fptr(g), fptr(m), fptr(v), C.ptrdiff_t(n), C.float(c.b1), C.float(c.ob1), C.float(c.b2), C.float(c.ob2),
		C.float(c.wd), C.float(c.step), C.float(c.invSqrtBC2), C.float(c.eps))
}
