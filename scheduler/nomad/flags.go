package nomad

import (
	"flag"
	"os"
	"strings"
)

// Flags are the Nomad CLI's connection flags, with its environment
// variables as defaults: how every nomad-train command reaches Nomad.
type Flags struct {
	Address, Token, Namespace, Region string
}

// Register adds -address, -token, -namespace and -region to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Address, "address", os.Getenv("NOMAD_ADDR"), "Nomad address (env NOMAD_ADDR)")
	// No env default here: flag help prints defaults, and a token must not
	// show up there; nomad/api reads NOMAD_TOKEN itself.
	fs.StringVar(&f.Token, "token", "", "Nomad ACL token (default env NOMAD_TOKEN)")
	fs.StringVar(&f.Namespace, "namespace", os.Getenv("NOMAD_NAMESPACE"), "Nomad namespace (env NOMAD_NAMESPACE)")
	fs.StringVar(&f.Region, "region", os.Getenv("NOMAD_REGION"), "Nomad region (env NOMAD_REGION)")
}

// Client connects as the flags say. An address without a scheme is an
// agent's host:port, as in its own config.
func (f *Flags) Client() (*Client, error) {
	addr := f.Address
	if addr != "" && !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return NewClient(Config{Address: addr, Token: f.Token, Namespace: f.Namespace, Region: f.Region})
}
