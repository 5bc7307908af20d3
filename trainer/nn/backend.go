package nn

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// Backend computes the general matrix product that every Linear layer uses.
// Sgemm follows BLAS semantics on row-major operands:
//
//	C = alpha * op(A) * op(B) + beta * C
//
// where op(X) is X or Xᵀ as transA/transB say, op(A) is m×k, op(B) is k×n
// and C is m×n; lda, ldb and ldc are the row strides of A, B and C as stored.
// When beta is zero C need not be initialised.
//
// Implementations must be safe for use by one goroutine at a time per model;
// a model never calls its backend concurrently.
type Backend interface {
	Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)
}

// Gonum is the default Backend: gonum's pure-Go BLAS. For products whose
// output spans at least four 64×64 blocks gonum starts a goroutine per
// block, which allocates per call (34 allocations for a 256×256 product);
// Parallel avoids that.
type Gonum struct{}

// Sgemm implements Backend.
func (Gonum) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gonum.Implementation{}.Sgemm(trans(transA), trans(transB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func trans(t bool) blas.Transpose {
	if t {
		return blas.Trans
	}
	return blas.NoTrans
}
