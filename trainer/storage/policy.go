package storage

import "fmt"

// FsyncPolicy says which progress records are flushed to stable storage
// before Append returns. Checkpoint files, directories and the record that
// commits a checkpoint are always flushed.
type FsyncPolicy int

const (
	// FsyncEveryRecord flushes every record (the zero value, the safest).
	FsyncEveryRecord FsyncPolicy = iota
	// FsyncCheckpointRecords flushes only the records that commit a
	// checkpoint (which flushes the records before them too). Plain metric
	// records written since may be lost by a machine crash, not by a
	// process crash.
	FsyncCheckpointRecords
)

// String names the policy.
func (f FsyncPolicy) String() string {
	switch f {
	case FsyncEveryRecord:
		return "every-record"
	case FsyncCheckpointRecords:
		return "checkpoint-records"
	}
	return fmt.Sprintf("FsyncPolicy(%d)", int(f))
}

// Score orders.
const (
	// ScoreMax keeps the checkpoints with the highest score.
	ScoreMax = "max"
	// ScoreMin keeps the checkpoints with the lowest score.
	ScoreMin = "min"
)

// Policy configures checkpoint retention and durability of a Run. It mirrors
// Ray Train's CheckpointConfig.
type Policy struct {
	// NumToKeep is how many checkpoints to keep, the best under the score;
	// 0 keeps all. The latest committed checkpoint is never deleted, so
	// NumToKeep+1 remain when the latest is not among the best.
	NumToKeep int
	// ScoreAttribute names the metric that ranks checkpoints. Empty ranks
	// them by recency (the most recent are kept).
	ScoreAttribute string
	// ScoreOrder is ScoreMax (the default when empty) or ScoreMin.
	ScoreOrder string
	// Fsync says which progress records are flushed.
	Fsync FsyncPolicy
}

// Validate reports a policy that cannot be applied.
func (p Policy) Validate() error {
	if p.NumToKeep < 0 {
		return fmt.Errorf("num_to_keep %d is negative", p.NumToKeep)
	}
	switch p.ScoreOrder {
	case "", ScoreMax, ScoreMin:
	default:
		return fmt.Errorf("score order %q is neither %q nor %q", p.ScoreOrder, ScoreMax, ScoreMin)
	}
	switch p.Fsync {
	case FsyncEveryRecord, FsyncCheckpointRecords:
	default:
		return fmt.Errorf("unknown fsync policy %d", int(p.Fsync))
	}
	return nil
}
