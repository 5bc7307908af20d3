package trainer

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/nomad-train/nomad-train/trainer/collective"
)

// Model is what data parallelism needs of a model: its parameters and their
// gradients, each in one flat buffer of the same layout (nn.Sequential is
// one).
type Model interface {
	Params() []float32
	Grads() []float32
}

// DistributedModel wraps a Model for data-parallel training (the
// counterpart of ray.train.torch.prepare_model / DistributedDataParallel).
type DistributedModel struct {
	model  Model
	s      *Session
	bucket int // elements per all-reduce call
}

// DefaultBucketBytes is the size of one gradient all-reduce: large enough to
// stream at full bandwidth, small enough to start sending early.
const DefaultBucketBytes = 32 << 20

// PrepareModel makes every rank start from rank 0's parameters and returns
// the wrapper whose SyncGradients averages gradients across ranks.
func PrepareModel(ctx context.Context, s *Session, m Model) (*DistributedModel, error) {
	if len(m.Params()) != len(m.Grads()) {
		return nil, fmt.Errorf("prepare model: %d parameters but %d gradients", len(m.Params()), len(m.Grads()))
	}
	if err := s.done(s.group.BroadcastFloat32(ctx, m.Params(), 0)); err != nil {
		return nil, fmt.Errorf("prepare model: broadcast parameters: %w", err)
	}
	return &DistributedModel{model: m, s: s, bucket: DefaultBucketBytes / int(unsafe.Sizeof(float32(0)))}, nil
}

// Model returns the wrapped model.
func (d *DistributedModel) Model() Model { return d.model }

// SyncGradients replaces every rank's gradients by their mean over the
// ranks, in as few all-reduce calls as the bucket size allows. Every rank
// ends with the same bits, so parameters stay identical across ranks.
func (d *DistributedModel) SyncGradients(ctx context.Context) error {
	g := d.model.Grads()
	for off := 0; off < len(g) || off == 0; off += d.bucket {
		end := min(off+d.bucket, len(g))
		if err := d.s.AllReduceFloat32(ctx, g[off:end], collective.Mean); err != nil {
			return fmt.Errorf("sync gradients: %w", err)
		}
		if end == len(g) {
			break
		}
	}
	return nil
}
