package nn

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// runTorchPeer runs testdata/torch_peer.py on specs with a python3 that
// imports torch, or skips the test. Debian's python3-torch installs into the
// system python3, which may not be the first python3 on PATH, so that one
// is tried first.
func runTorchPeer(t *testing.T, specs []torchSpec) []torchResult {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping the PyTorch peer in -short mode")
	}
	in, err := json.Marshal(specs)
	must.NoError(t, err)
	for _, name := range []string{"/usr/bin/python3", "python3"} {
		py, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		cmd := exec.Command(py, filepath.Join("testdata", "torch_peer.py"))
		cmd.Stdin = bytes.NewReader(in)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if strings.Contains(stderr.String(), "No module named 'torch'") {
			continue
		}
		must.NoError(t, err, must.Sprint(stderr.String()))
		var res []torchResult
		must.NoError(t, json.Unmarshal(out, &res))
		must.SliceLen(t, len(specs), res)
		return res
	}
	t.Skip("no python3 that imports torch; install Debian's python3-torch to compare with PyTorch")
	return nil
}

type torchSpec struct {
	Layers []any          `json:"layers"`
	Params []float32      `json:"params"`
	X      [][]float32    `json:"x"`
	Loss   string         `json:"loss"`
	Labels []int          `json:"labels,omitempty"`
	Target [][]float32    `json:"target,omitempty"`
	Optim  map[string]any `json:"optim"`
	Steps  int            `json:"steps"`
}

type torchResult struct {
	Loss   float64     `json:"loss"`
	Grads  []float64   `json:"grads"`
	DX     []float64   `json:"dx"`
	Params [][]float64 `json:"params"`
}

func rows(m *Matrix) [][]float32 {
	out := make([][]float32, m.Rows)
	for i := range out {
		out[i] = append([]float32(nil), m.Row(i)...)
	}
	return out
}

// TestMatchesPyTorch runs the same model, batch and optimizer through
// PyTorch (testdata/torch_peer.py) and compares the loss, the parameter and
// input gradients, and the parameters after each of three optimizer steps.
// Equal results also pin the flat parameter layout to torch's
// parameters() order.
func TestMatchesPyTorch(t *testing.T) {
	type layerSpec struct {
		torch []any
		layer func() Layer
	}
	lin := func(in, out int) layerSpec {
		return layerSpec{[]any{"linear", in, out}, func() Layer { return NewLinear(in, out) }}
	}
	act := func(name string, l func() Layer) layerSpec { return layerSpec{[]any{name}, l} }
	relu := act("relu", func() Layer { return NewReLU() })
	tanhL := act("tanh", func() Layer { return NewTanh() })
	sig := act("sigmoid", func() Layer { return NewSigmoid() })
	cases := []struct {
		name   string
		layers []layerSpec
		loss   string
		optim  map[string]any
		opt    func(m *Sequential) Optimizer
	}{
		{"tanh-ce-adam", []layerSpec{lin(4, 6), tanhL, lin(6, 3)}, "ce",
			map[string]any{"kind": "adam", "lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "wd": 0.01},
			func(m *Sequential) Optimizer {
				return NewAdam(m.Params(), m.Grads(), AdamConfig{LR: 0.01, WeightDecay: 0.01})
			}},
		{"relu-sigmoid-mse-sgd-nesterov", []layerSpec{lin(4, 8), relu, lin(8, 5), sig, lin(5, 2)}, "mse",
			map[string]any{"kind": "sgd", "lr": 0.1, "momentum": 0.9, "wd": 0.001, "nesterov": true},
			func(m *Sequential) Optimizer {
				return NewSGD(m.Params(), m.Grads(), SGDConfig{LR: 0.1, Momentum: 0.9, WeightDecay: 0.001, Nesterov: true})
			}},
		{"linear-mse-sgd-momentum", []layerSpec{lin(4, 3)}, "mse",
			map[string]any{"kind": "sgd", "lr": 0.05, "momentum": 0.5, "wd": 0.0, "nesterov": false},
			func(m *Sequential) Optimizer {
				return NewSGD(m.Params(), m.Grads(), SGDConfig{LR: 0.05, Momentum: 0.5})
			}},
	}
	type prepared struct {
		m    *Sequential
		x    *Matrix
		loss LossFunc
		opt  Optimizer
	}
	var specs []torchSpec
	var runs []prepared
	for _, tc := range cases {
		rng := rand.New(rand.NewPCG(21, 22))
		var layers []Layer
		spec := torchSpec{Loss: tc.loss, Optim: tc.optim, Steps: 3}
		for _, l := range tc.layers {
			layers = append(layers, l.layer())
			spec.Layers = append(spec.Layers, l.torch)
		}
		m := NewSequential(rng, layers...)
		x := randomInput(rng, 7, 4, 0)
		outCols := layers[len(layers)-1].(*Linear).Out
		var loss LossFunc
		if tc.loss == "ce" {
			labels := make([]int, x.Rows)
			for i := range labels {
				labels[i] = rng.IntN(outCols)
			}
			spec.Labels, loss = labels, crossEntropyTo(labels)
		} else {
			target := randomInput(rng, x.Rows, outCols, 0)
			spec.Target, loss = rows(target), mseTo(target)
		}
		spec.Params = append([]float32(nil), m.Params()...)
		spec.X = rows(x)
		specs = append(specs, spec)
		runs = append(runs, prepared{m, x, loss, tc.opt(m)})
	}
	// One python process for all cases: importing torch takes seconds.
	results := runTorchPeer(t, specs)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, want := runs[i], results[i]
			var g Matrix
			r.m.ZeroGrad()
			got := r.loss(r.m.Forward(r.x), &g)
			dx := r.m.Backward(&g)
			must.InDelta(t, want.Loss, got, 1e-5*(1+math.Abs(want.Loss)))
			assertClose(t, "grads", want.Grads, r.m.Grads())
			assertClose(t, "dx", want.DX, dx.Data)
			r.opt.Step()
			assertClose(t, "params after step 1", want.Params[0], r.m.Params())
			step := stepper(r.m, r.opt, r.x, r.loss)
			for s := 1; s < len(want.Params); s++ {
				step()
				assertClose(t, "params after a later step", want.Params[s], r.m.Params())
			}
		})
	}
}

func assertClose(t *testing.T, what string, want []float64, got []float32) {
	t.Helper()
	must.SliceLen(t, len(want), got, must.Sprint(what))
	for i := range want {
		if d := math.Abs(want[i] - float64(got[i])); d > 1e-5*(1+math.Abs(want[i])) {
			t.Fatalf("%s[%d]: got %v, PyTorch %v", what, i, got[i], want[i])
		}
	}
}
