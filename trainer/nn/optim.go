package nn

import (
	"fmt"
	"math"
)

// Optimizer updates a flat parameter buffer from the flat gradient buffer
// laid out like it. Its state is flat too, so checkpoints store it as one
// block.
type Optimizer interface {
	// Step applies one update from the current gradients. It does not zero
	// them.
	Step()
	// Kind names the algorithm ("sgd", "adam"); checkpoints refuse to load
	// one kind's state into another.
	Kind() string
	// State returns the optimizer's flat state buffer; it aliases the
	// optimizer, so copying into it restores state.
	State() []float32
	// Steps is the number of Step calls so far (restored with SetSteps).
	Steps() int64
	// SetSteps sets the step count, as a checkpoint restore does.
	SetSteps(n int64)
	// LR is the current learning rate.
	LR() float32
	// SetLR changes the learning rate, for schedules.
	SetLR(lr float32)
}

// SGDConfig configures stochastic gradient descent as PyTorch's optim.SGD
// does (with dampening 0).
type SGDConfig struct {
	LR float32
	// Momentum is the velocity decay; 0 disables momentum and its state.
	Momentum float32
	// WeightDecay adds WeightDecay·param to each gradient (L2 penalty).
	WeightDecay float32
	// Nesterov uses Nesterov momentum.
	Nesterov bool
}

// SGD is stochastic gradient descent with optional momentum and weight decay:
//
//	g = grad + wd·p;  v = μ·v + g;  p -= lr·(Nesterov ? g + μ·v : v)
//
// and p -= lr·g without momentum.
type SGD struct {
	cfg    SGDConfig
	params []float32
	grads  []float32
	vel    []float32 // nil without momentum
	steps  int64
}

// NewSGD returns an SGD optimizer over params and grads (equal lengths, e.g.
// a model's Params and Grads).
func NewSGD(params, grads []float32, cfg SGDConfig) *SGD {
	mustSameLen(params, grads)
	s := &SGD{cfg: cfg, params: params, grads: grads}
	if cfg.Momentum != 0 {
		s.vel = make([]float32, len(params))
	}
	return s
}

// Step implements Optimizer.
func (s *SGD) Step() {
	c := s.cfg
	if s.vel == nil {
		sgdUpdate(s.params, s.grads, c.LR, c.WeightDecay)
	} else {
		sgdMomentumUpdate(s.params, s.grads, s.vel, c.LR, c.Momentum, c.WeightDecay, c.Nesterov)
	}
	s.steps++
}

// Kind implements Optimizer.
func (*SGD) Kind() string { return "sgd" }

// State implements Optimizer: the velocity buffer, empty without momentum.
func (s *SGD) State() []float32 { return s.vel }

// Steps implements Optimizer.
func (s *SGD) Steps() int64 { return s.steps }

// SetSteps implements Optimizer.
func (s *SGD) SetSteps(n int64) { s.steps = n }

// LR implements Optimizer.
func (s *SGD) LR() float32 { return s.cfg.LR }

// SetLR implements Optimizer.
func (s *SGD) SetLR(lr float32) { s.cfg.LR = lr }

// AdamConfig configures Adam as PyTorch's optim.Adam does. NewAdam replaces
// a zero Beta1, Beta2 or Eps by PyTorch's default (0.9, 0.999, 1e-8).
type AdamConfig struct {
	LR           float32
	Beta1, Beta2 float32
	Eps          float32
	// WeightDecay adds WeightDecay·param to each gradient (L2 penalty, as
	// optim.Adam does, not AdamW's decoupled decay).
	WeightDecay float32
}

// Adam is the bias-corrected Adam optimizer:
//
//	g = grad + wd·p;  m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²
//	p -= lr · (m/(1-β1ᵗ)) / (√(v/(1-β2ᵗ)) + ε)
type Adam struct {
	cfg    AdamConfig
	params []float32
	grads  []float32
	state  []float32 // m followed by v
	steps  int64
}

// NewAdam returns an Adam optimizer over params and grads (equal lengths).
func NewAdam(params, grads []float32, cfg AdamConfig) *Adam {
	mustSameLen(params, grads)
	if cfg.Beta1 == 0 {
		cfg.Beta1 = 0.9
	}
	if cfg.Beta2 == 0 {
		cfg.Beta2 = 0.999
	}
	if cfg.Eps == 0 {
		cfg.Eps = 1e-8
	}
	return &Adam{cfg: cfg, params: params, grads: grads, state: make([]float32, 2*len(params))}
}

// Step implements Optimizer.
func (a *Adam) Step() {
	a.steps++
	n := len(a.params)
	adamUpdate(a.params, a.grads, a.state[:n], a.state[n:2*n], a.coef())
}

// coef folds the current step's bias corrections into the update's scalars.
func (a *Adam) coef() adamCoef {
	c := a.cfg
	t := float64(a.steps)
	bc1 := 1 - math.Pow(float64(c.Beta1), t)
	bc2 := 1 - math.Pow(float64(c.Beta2), t)
	return adamCoef{
		b1: c.Beta1, ob1: 1 - c.Beta1, b2: c.Beta2, ob2: 1 - c.Beta2, wd: c.WeightDecay,
		step: float32(float64(c.LR) / bc1), invSqrtBC2: float32(1 / math.Sqrt(bc2)), eps: c.Eps,
	}
}

// Kind implements Optimizer.
func (*Adam) Kind() string { return "adam" }

// State implements Optimizer: the first moments followed by the second.
func (a *Adam) State() []float32 { return a.state }

// Steps implements Optimizer.
func (a *Adam) Steps() int64 { return a.steps }

// SetSteps implements Optimizer.
func (a *Adam) SetSteps(n int64) { a.steps = n }

// LR implements Optimizer.
func (a *Adam) LR() float32 { return a.cfg.LR }

// SetLR implements Optimizer.
func (a *Adam) SetLR(lr float32) { a.cfg.LR = lr }

func mustSameLen(params, grads []float32) {
	if len(params) != len(grads) {
		panic(fmt.Sprintf("nn: optimizer over %d params and %d grads", len(params), len(grads)))
	}
}
