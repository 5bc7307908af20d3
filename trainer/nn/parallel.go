package nn

import (
	"fmt"
	"sync"

	"gonum.org/v1/gonum/blas/gonum"
)

// tile is the side of the square C tiles Parallel hands out. At 64 (gonum's
// own block size) each tile is below gonum's parallel threshold, so gonum
// runs it serially on the worker that owns it.
const tile = 64

// serialFlops is the size (m·n·k) below which Parallel does not wake its
// workers: the hand-off costs more than it saves.
const serialFlops = 64 * 64 * 64

// Parallel is a Backend that splits C into 64×64 tiles and computes them
// with gonum's serial kernel on a fixed set of goroutines started by
// NewParallel, the caller's goroutine being one of them. Unlike Gonum it
// does not allocate per call, whatever the size. Close stops the workers;
// the model must not use it afterwards.
//
// One Parallel serves one model (one Sgemm at a time).
type Parallel struct {
	jobs []chan gemmJob // one per extra worker
	wg   sync.WaitGroup // the current call's workers
	quit sync.WaitGroup // running worker goroutines
	once sync.Once
}

// gemmJob is one Sgemm call and the tiles worker number part of parts
// computes: tiles part, part+parts, part+2·parts, ...
type gemmJob struct {
	tA, tB      bool
	m, n, k     int
	alpha, beta float32
	a, b, c     []float32
	lda, ldb    int
	ldc         int
	part, parts int
}

// NewParallel starts workers-1 goroutines (the caller is the last worker).
// workers below 1 count as 1, a serial backend.
func NewParallel(workers int) *Parallel {
	p := &Parallel{jobs: make([]chan gemmJob, max(workers, 1)-1)}
	for i := range p.jobs {
		p.jobs[i] = make(chan gemmJob)
		p.quit.Add(1)
		go p.work(p.jobs[i])
	}
	return p
}

func (p *Parallel) work(jobs <-chan gemmJob) {
	defer p.quit.Done()
	for j := range jobs {
		j.run()
		p.wg.Done()
	}
}

// Close stops the worker goroutines and waits for them to exit.
func (p *Parallel) Close() {
	p.once.Do(func() {
		for _, ch := range p.jobs {
			close(ch)
		}
		p.quit.Wait()
	})
}

// Workers is the number of goroutines that share each product.
func (p *Parallel) Workers() int { return len(p.jobs) + 1 }

// Sgemm implements Backend.
func (p *Parallel) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	j := gemmJob{tA: transA, tB: transB, m: m, n: n, k: k, alpha: alpha, beta: beta,
		a: a, b: b, c: c, lda: lda, ldb: ldb, ldc: ldc, parts: 1}
	tiles := ceilDiv(m, tile) * ceilDiv(n, tile)
	if len(p.jobs) == 0 || tiles < 2 || m*n*k < serialFlops {
		j.run()
		return
	}
	j.parts = min(len(p.jobs)+1, tiles)
	p.wg.Add(j.parts - 1)
	for i := 0; i < j.parts-1; i++ {
		j.part = i
		p.jobs[i] <- j
	}
	j.part = j.parts - 1
	j.run()
	p.wg.Wait()
}

// run computes this job's share of C's tiles.
func (j gemmJob) run() {
	if j.m == 0 || j.n == 0 {
		return
	}
	impl := gonum.Implementation{}
	if j.k == 0 {
		// Only C = beta·C; A and B may be empty, so do not slice them.
		impl.Sgemm(trans(j.tA), trans(j.tB), j.m, j.n, 0, j.alpha, j.a, j.lda, j.b, j.ldb, j.beta, j.c, j.ldc)
		return
	}
	tn := ceilDiv(j.n, tile)
	total := ceilDiv(j.m, tile) * tn
	for t := j.part; t < total; t += j.parts {
		i0, j0 := (t/tn)*tile, (t%tn)*tile
		mi, nj := min(tile, j.m-i0), min(tile, j.n-j0)
		// Row-major offsets of the tile's operands: op(A) rows i0.., op(B)
		// columns j0.., C at (i0, j0).
		aOff := i0 * j.lda
		if j.tA {
			aOff = i0
		}
		bOff := j0
		if j.tB {
			bOff = j0 * j.ldb
		}
		impl.Sgemm(trans(j.tA), trans(j.tB), mi, nj, j.k, j.alpha,
			j.a[aOff:], j.lda, j.b[bOff:], j.ldb, j.beta, j.c[i0*j.ldc+j0:], j.ldc)
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// String describes the backend for benchmarks and logs.
func (p *Parallel) String() string { return fmt.Sprintf("parallel(%d)", p.Workers()) }
