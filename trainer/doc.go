// Package trainer is the Go training runtime of nomad-train, the counterpart
// of ray.train: a training function runs once per worker process, learns its
// rank, shards its data, averages gradients with its peers over TCP, reports
// metrics and checkpoints, and resumes from the latest checkpoint.
//
// New builds a Trainer; Fit re-executes the program as NumWorkers worker
// processes on this machine (the embedded default: no Nomad, no Consul) and
// waits for them. In a worker process (NOMAD_TRAIN_WORKER=1) Fit runs the
// training function instead and exits the process when it returns, so the
// code after Fit runs only in the launching process:
//
//	func trainFunc(ctx context.Context, s *trainer.Session) error {
//		for epoch := 0; epoch < 10; epoch++ {
//			loss := ... // train one epoch on this rank's shard
//			if err := s.Report(ctx, trainer.Metrics{"loss": loss}, nil); err != nil {
//				return err
//			}
//		}
//		return nil
//	}
//
//	func main() {
//		t := trainer.New(trainFunc, trainer.Scaling{NumWorkers: 4},
//			trainer.Run{Name: "quickstart", StoragePath: "./results"}, nil)
//		result, err := t.Fit(context.Background())
//		...
//	}
package trainer
