package workerenv

import (
	"encoding/json"
	"strconv"
	"time"
)

// Environ is the worker environment that Load decodes into e, as KEY=VALUE
// pairs: the exact inverse of Load for every Env that Load returns. The
// local launcher and the Nomad task driver both write a worker's contract
// variables only through it, so a worker sees the same settings wherever
// it runs.
func (e Env) Environ() []string {
	var out []string
	add := func(k, v string) { out = append(out, k+"="+v) }
	str := func(k, v string) {
		if v != "" {
			add(k, v)
		}
	}
	dur := func(k string, d time.Duration) {
		if d > 0 {
			add(k, d.String())
		}
	}
	add(Worker, "1")
	add(RunName, e.RunName)
	add(WorldSize, strconv.Itoa(e.WorldSize))
	if e.MinWorldSize > 0 && e.MinWorldSize < e.WorldSize {
		add(MinWorldSize, strconv.Itoa(e.MinWorldSize))
	}
	dur(Settle, e.Settle)
	if e.RankHint >= 0 {
		add(RankHint, strconv.Itoa(e.RankHint))
	}
	str(MemberID, e.MemberID)
	str(Node, e.Node)
	str(Addr, e.Addr)
	str(Rendezvous, e.Rendezvous)
	dur(RendezvousTimeout, e.RendezvousTimeout)
	dur(ConsulOutageGrace, e.ConsulOutageGrace)
	str(StoragePath, e.StoragePath)
	str(StorageEndpoint, e.StorageEndpoint)
	str(StorageRegion, e.StorageRegion)
	if e.StoragePathStyle {
		add(StoragePathStyle, "true")
	}
	if len(e.Config) > 0 {
		add(Config, string(e.Config))
	}
	if e.Checkpoint != (CheckpointPolicy{}) {
		js, _ := json.Marshal(e.Checkpoint) // strings and an int always encode
		add(Checkpoint, string(js))
	}
	add(MaxFailures, strconv.Itoa(e.MaxFailures))
	str(Builtin, e.Builtin)
	str(Events, e.Events)
	str(SecretFile, e.SecretFile)
	str(MetricsAddr, e.MetricsAddr)
	if e.TorchPort > 0 {
		add(TorchPort, strconv.Itoa(e.TorchPort))
	}
	str(Mounts, EncodeMounts(e.Mounts))
	dur(CollectiveTimeout, e.CollectiveTimeout)
	if e.CollectiveTCPOnly {
		add(CollectiveTransport, "tcp")
	}
	if e.FsyncCheckpointsOnly {
		add(Fsync, "checkpoints")
	}
	dur(StopGrace, e.StopGrace)
	dur(LeaseTTL, e.LeaseTTL)
	dur(StorageOutageGrace, e.StorageOutageGrace)
	dur(StorageStallTimeout, e.StorageStallTimeout)
	dur(StallFloor, e.StallFloor)
	if e.StallFactor != 0 {
		add(StallFactor, strconv.FormatFloat(e.StallFactor, 'g', -1, 64))
	}
	return out
}
