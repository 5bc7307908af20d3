package driver

import (
	"context"
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nomad-train/nomad-train/driver/proto/base"
	"github.com/nomad-train/nomad-train/driver/proto/drivers"
	"github.com/nomad-train/nomad-train/driver/proto/hclspec"
)

// Plugin identity.
const (
	// PluginName is the driver's name in jobs (driver = "train"), in the
	// agent's plugin "train" {} block and as the binary's file name.
	PluginName = "train"
	// PluginVersion is the plugin's own semantic version.
	PluginVersion = "0.1.0"
	// APIVersion is the only driver API version Nomad has ever defined.
	APIVersion = "v0.1.0"
)

// Go-plugin plugin-set names. They key go-plugin's maps; they never travel.
const (
	PluginSetBase   = "base"
	PluginSetDriver = "driver"
)

// Handshake is the go-plugin handshake a Nomad client expects of every
// plugin: app protocol 2 (gRPC) and Nomad's magic cookie.
func Handshake() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		ProtocolVersion:  2,
		MagicCookieKey:   "NOMAD_PLUGIN_MAGIC_COOKIE",
		MagicCookieValue: "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255",
	}
}

// PluginSet is the go-plugin plugin map of the driver. On the server side
// d serves both services; a client passes a nil Driver and dispenses
// PluginSetBase (base.BasePluginClient) or PluginSetDriver
// (drivers.DriverClient).
func PluginSet(d *Driver) plugin.PluginSet {
	return plugin.PluginSet{
		PluginSetBase:   &basePlugin{d: d},
		PluginSetDriver: &driverPlugin{d: d},
	}
}

// Serve runs d as a Nomad plugin on this process's stdio until the client
// goes away. logger should write JSON to stderr (go-plugin relays it).
func Serve(d *Driver, logger hclog.Logger) {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake(),
		Plugins:         PluginSet(d),
		GRPCServer:      plugin.DefaultGRPCServer,
		Logger:          logger,
	})
}

type basePlugin struct {
	plugin.NetRPCUnsupportedPlugin
	d *Driver
}

func (p *basePlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	base.RegisterBasePluginServer(s, p.d)
	return nil
}

func (p *basePlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return base.NewBasePluginClient(c), nil
}

type driverPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	d *Driver
}

func (p *driverPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	drivers.RegisterDriverServer(s, p.d)
	return nil
}

func (p *driverPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return drivers.NewDriverClient(c), nil
}

// PluginInfo implements the BasePlugin service.
func (d *Driver) PluginInfo(context.Context, *base.PluginInfoRequest) (*base.PluginInfoResponse, error) {
	return &base.PluginInfoResponse{
		Type:              base.PluginType_DRIVER,
		PluginApiVersions: []string{APIVersion},
		PluginVersion:     d.version,
		Name:              PluginName,
	}, nil
}

// ConfigSchema implements the BasePlugin service.
func (d *Driver) ConfigSchema(context.Context, *base.ConfigSchemaRequest) (*base.ConfigSchemaResponse, error) {
	return &base.ConfigSchemaResponse{Spec: PluginConfigSpec()}, nil
}

// SetConfig implements the BasePlugin service. The agent calls it once on a
// throw-away process to check the config (nomad_config unset) and once on
// the long-lived instance.
func (d *Driver) SetConfig(_ context.Context, req *base.SetConfigRequest) (*base.SetConfigResponse, error) {
	if v := req.GetPluginApiVersion(); v != "" && v != APIVersion && v != APIVersion[1:] {
		return nil, status.Errorf(codes.InvalidArgument, "plugin API version %q is not supported (want %s)", v, APIVersion)
	}
	cfg, err := DecodePluginConfig(req.GetMsgpackConfig())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	d.setConfig(cfg, req.GetNomadConfig())
	warnPolicy(d.logger, cfg, os.Geteuid())
	d.logger.Debug("plugin configured", "allowed_command_dirs", cfg.AllowedCommandDirs, "gpu_stats", cfg.GPUStats, "stats_interval", cfg.StatsInterval.String())
	return &base.SetConfigResponse{}, nil
}

// PluginConfigSpec is the schema of plugin "train" { config { ... } }.
func PluginConfigSpec() *hclspec.Spec { return pluginConfigSpec() }

// TaskConfigSpec is the schema of a task's config { ... } block.
func TaskConfigSpec() *hclspec.Spec { return taskConfigSpec() }

// errUnknownTask is returned for task ids the driver does not hold.
func errUnknownTask(id string) error {
	return status.Error(codes.NotFound, fmt.Sprintf("task not found for given id %q", id))
}
