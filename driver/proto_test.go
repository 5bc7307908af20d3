package driver

import (
	"testing"

	"github.com/shoenig/test/must"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/nomad-train/nomad-train/driver/proto/base"
	"github.com/nomad-train/nomad-train/driver/proto/drivers"
	"github.com/nomad-train/nomad-train/driver/proto/hclspec"
	"github.com/nomad-train/nomad-train/driver/proto/structs"
)

// TestWireLayoutMatchesNomad pins the names and numbers the Nomad client
// depends on (from the protocol reference), so an edit of the .proto files
// that would break compatibility fails here.
func TestWireLayoutMatchesNomad(t *testing.T) {
	must.Eq(t, "/hashicorp.nomad.plugins.base.proto.BasePlugin/SetConfig", base.BasePlugin_SetConfig_FullMethodName)
	must.Eq(t, "/hashicorp.nomad.plugins.drivers.proto.Driver/StartTask", drivers.Driver_StartTask_FullMethodName)
	must.Eq(t, "/hashicorp.nomad.plugins.drivers.proto.Driver/ExecTaskStreaming", drivers.Driver_ExecTaskStreaming_FullMethodName)
	must.Eq(t, "/hashicorp.nomad.plugins.drivers.proto.Driver/Init", drivers.Driver_Init_FullMethodName)

	a, err := anypb.New(&structs.RecoverableError{Recoverable: true})
	must.NoError(t, err)
	must.Eq(t, "type.googleapis.com/hashicorp.nomad.plugins.shared.structs.RecoverableError", a.GetTypeUrl())

	fields := []struct {
		msg    proto.Message
		name   string
		number protoreflect.FieldNumber
	}{
		{&base.PluginInfoResponse{}, "plugin_api_versions", 2},
		{&base.SetConfigRequest{}, "plugin_api_version", 3},
		{&base.NomadDriverConfig{}, "ClientMinPort", 2},
		{&base.NomadDriverConfig{}, "Topology", 3},
		{&hclspec.Spec{}, "Attr", 3},
		{&hclspec.Spec{}, "literal", 10},
		{&drivers.FingerprintResponse{}, "err", 4},
		{&drivers.TaskConfig{}, "msgpack_driver_config", 3},
		{&drivers.TaskConfig{}, "stderr_path", 12},
		{&drivers.TaskConfig{}, "dns", 17},
		{&drivers.TaskConfig{}, "node_id", 21},
		{&drivers.TaskConfig{}, "parent_job_id", 22},
		{&drivers.DriverCapabilities{}, "disable_log_collection", 8},
		{&drivers.DriverCapabilities{}, "dynamic_workload_users", 9},
		{&drivers.LinuxResources{}, "PercentTicks", 8},
		{&drivers.LinuxResources{}, "cpuset_cgroup", 9},
		{&drivers.AllocatedTaskResources{}, "networks", 5},
		{&drivers.AllocatedMemoryResources{}, "memory_mb", 2},
		{&drivers.MemoryUsage{}, "measured_fields", 6},
		{&drivers.MemoryUsage{}, "usage", 7},
		{&drivers.MemoryUsage{}, "swap", 8},
		{&drivers.CPUUsage{}, "measured_fields", 7},
		{&drivers.NetworkIsolationSpec{}, "hostsConfig", 4},
		{&drivers.TaskHandle{}, "driver_state", 4},
		{&drivers.DriverTaskEvent{}, "annotations", 6},
		{&drivers.ExecTaskStreamingResponse{}, "result", 4},
	}
	for _, f := range fields {
		d := f.msg.ProtoReflect().Descriptor()
		fd := d.Fields().ByName(protoreflect.Name(f.name))
		must.NotNil(t, fd, must.Sprintf("%s.%s", d.FullName(), f.name))
		must.Eq(t, f.number, fd.Number(), must.Sprintf("%s.%s", d.FullName(), f.name))
	}
	caps := (&drivers.DriverCapabilities{}).ProtoReflect().Descriptor()
	must.True(t, caps.ReservedRanges().Has(7)) // remote_tasks, removed
	must.Eq(t, protoreflect.EnumNumber(2), base.PluginType_DRIVER.Number())
	must.Eq(t, protoreflect.EnumNumber(3), drivers.DriverCapabilities_UNVEIL.Number())
	must.Eq(t, protoreflect.EnumNumber(3), drivers.NetworkIsolationSpec_NONE.Number())
	must.Eq(t, protoreflect.EnumNumber(6), drivers.MemoryUsage_SWAP.Number())
}
