package nn

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/shoenig/test/must"
)

func ckptModel(seed uint64) *Sequential {
	return NewSequential(rand.New(rand.NewPCG(seed, 1)), NewLinear(3, 8), NewTanh(), NewLinear(8, 2))
}

// trainSteps runs n cross-entropy steps on a fixed batch.
func trainSteps(m *Sequential, opt Optimizer, n int) {
	rng := rand.New(rand.NewPCG(5, 5))
	x := randomInput(rng, 8, 3, 0)
	step := stepper(m, opt, x, crossEntropyTo([]int{0, 1, 1, 0, 1, 0, 0, 1}))
	for i := 0; i < n; i++ {
		step()
	}
}

func optimizers() map[string]func(m *Sequential) Optimizer {
	return map[string]func(m *Sequential) Optimizer{
		"sgd":          func(m *Sequential) Optimizer { return NewSGD(m.Params(), m.Grads(), SGDConfig{LR: 0.1}) },
		"sgd-momentum": func(m *Sequential) Optimizer { return NewSGD(m.Params(), m.Grads(), SGDConfig{LR: 0.1, Momentum: 0.9}) },
		"adam":         func(m *Sequential) Optimizer { return NewAdam(m.Params(), m.Grads(), AdamConfig{LR: 0.01}) },
	}
}

func TestStateRoundTripResumesExactly(t *testing.T) {
	for name, newOpt := range optimizers() {
		t.Run(name, func(t *testing.T) {
			// Reference: 5 uninterrupted steps.
			ref := ckptModel(1)
			refOpt := newOpt(ref)
			trainSteps(ref, refOpt, 3)
			var buf bytes.Buffer
			must.NoError(t, SaveState(&buf, ref, refOpt))
			saved := bytes.Clone(buf.Bytes())
			trainSteps(ref, refOpt, 2)

			// Restore into a differently initialised model and go on.
			m := ckptModel(2)
			opt := newOpt(m)
			must.NoError(t, LoadState(bytes.NewReader(saved), m, opt))
			must.Eq(t, 3, opt.Steps())

			// Saving again reproduces the file bit for bit.
			var again bytes.Buffer
			must.NoError(t, SaveState(&again, m, opt))
			must.Eq(t, saved, again.Bytes())

			trainSteps(m, opt, 2)
			must.Eq(t, ref.Params(), m.Params())
			must.Eq(t, refOpt.State(), opt.State())
			must.Eq(t, refOpt.Steps(), opt.Steps())
		})
	}
}

// trainedAdam returns ckptModel(1) after one Adam step, and its state file.
func trainedAdam(t testing.TB) (*Sequential, []byte) {
	t.Helper()
	m := ckptModel(1)
	opt := NewAdam(m.Params(), m.Grads(), AdamConfig{LR: 0.01})
	trainSteps(m, opt, 1)
	var buf bytes.Buffer
	must.NoError(t, SaveState(&buf, m, opt))
	return m, buf.Bytes()
}

func TestLoadStateWithoutOptimizer(t *testing.T) {
	src, saved := trainedAdam(t)
	m := ckptModel(2)
	must.NoError(t, LoadState(bytes.NewReader(saved), m, nil))
	must.Eq(t, src.Params(), m.Params())

	// A file saved without an optimizer does not load into one.
	var buf bytes.Buffer
	must.NoError(t, SaveState(&buf, src, nil))
	err := LoadState(bytes.NewReader(buf.Bytes()), m, NewAdam(m.Params(), m.Grads(), AdamConfig{}))
	must.ErrorIs(t, err, ErrMismatch)
}

func TestLoadStateRefuses(t *testing.T) {
	src := ckptModel(1)
	srcOpt := NewSGD(src.Params(), src.Grads(), SGDConfig{LR: 0.1, Momentum: 0.9})
	trainSteps(src, srcOpt, 1)
	var buf bytes.Buffer
	must.NoError(t, SaveState(&buf, src, srcOpt))
	good := buf.Bytes()

	withVersion := bytes.Clone(good)
	withVersion[4] = 9
	cases := []struct {
		name  string
		data  []byte
		model *Sequential
		opt   func(m *Sequential) Optimizer
		want  error
	}{
		{"other-architecture", good, NewSequential(nil, NewLinear(3, 8), NewReLU(), NewLinear(8, 2)), nil, ErrMismatch},
		{"other-shape", good, NewSequential(nil, NewLinear(3, 9), NewTanh(), NewLinear(9, 2)), nil, ErrMismatch},
		{"other-optimizer", good, ckptModel(3), optimizers()["adam"], ErrMismatch},
		{"sgd-without-momentum", good, ckptModel(3), optimizers()["sgd"], ErrMismatch},
		{"empty", nil, ckptModel(3), nil, ErrCorrupt},
		{"not-state", []byte("PK\x03\x04 a zip file, say"), ckptModel(3), nil, ErrNotState},
		{"future-version", withVersion, ckptModel(3), nil, ErrVersion},
		{"trailing-data", append(bytes.Clone(good), 0), ckptModel(3), nil, ErrCorrupt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var opt Optimizer
			if tc.opt != nil {
				opt = tc.opt(tc.model)
			}
			before := bits(tc.model.Params())
			err := LoadState(bytes.NewReader(tc.data), tc.model, opt)
			must.ErrorIs(t, err, tc.want)
			t.Log(err)
			must.Eq(t, before, bits(tc.model.Params()))
		})
	}
}

// TestLoadStateEveryTruncationAndFlip cuts the file at every length and
// flips every byte: each must fail with a typed error and leave the model
// untouched.
func TestLoadStateEveryTruncationAndFlip(t *testing.T) {
	_, good := trainedAdam(t)

	m := ckptModel(2)
	opt := NewAdam(m.Params(), m.Grads(), AdamConfig{LR: 0.01})
	before := bits(m.Params())
	typed := func(err error) bool {
		return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrMismatch) || errors.Is(err, ErrNotState) || errors.Is(err, ErrVersion)
	}
	for n := 0; n < len(good); n++ {
		err := LoadState(bytes.NewReader(good[:n]), m, opt)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d of %d bytes: got %v, want ErrCorrupt", n, len(good), err)
		}
	}
	for i := range good {
		bad := bytes.Clone(good)
		bad[i] ^= 0x5a
		if err := LoadState(bytes.NewReader(bad), m, opt); !typed(err) {
			t.Fatalf("byte %d flipped: got %v", i, err)
		}
	}
	must.Eq(t, before, bits(m.Params()))
	must.Eq(t, 0, opt.Steps())
}

// bits returns the bit patterns of v, so comparisons are exact even for NaN.
func bits(v []float32) []uint32 {
	out := make([]uint32, len(v))
	for i, f := range v {
		out[i] = math.Float32bits(f)
	}
	return out
}
