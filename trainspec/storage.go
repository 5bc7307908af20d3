package trainspec

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// Where workers on Nomad get the keys of an S3 storage path (storage {
// credentials = ... }).
const (
	// CredentialsVariable (the default) renders the keys from a Nomad
	// Variable into the worker task's environment (S3CredentialsTemplate).
	CredentialsVariable = "variable"
	// CredentialsNode leaves them to the AWS chain on the client: an
	// instance or task role, or the client's own shared config. The
	// compiled job then carries no template.
	CredentialsNode = "node"
)

// The items of the credentials Variable, as `nomad var put` writes them.
const (
	S3AccessKeyItem = "aws_access_key_id"
	S3SecretKeyItem = "aws_secret_access_key"
	// S3CredentialsFile is where the template renders them (env = true:
	// Nomad reads it into the task's environment), relative to the task
	// directory.
	S3CredentialsFile = "secrets/s3.env"
)

// Storage is a run's storage {} block: where the run is kept and, for an
// s3:// path, the object store's non-secret options. Credentials never
// appear here (see Credentials).
type Storage struct {
	Endpoint  string `json:",omitempty"`
	Region    string `json:",omitempty"`
	PathStyle bool   `json:",omitempty"`
	// Credentials is CredentialsVariable or CredentialsNode; "" is the
	// default, CredentialsVariable.
	Credentials string `json:",omitempty"`
	// CredentialsVariable is the Variable path the keys are read from;
	// "" is S3CredentialsVariablePath(job).
	CredentialsVariable string `json:",omitempty"`
}

// Options is what workers get of the block: its non-secret options.
func (s *Storage) Options() workerenv.StorageOptions {
	if s == nil {
		return workerenv.StorageOptions{}
	}
	return workerenv.StorageOptions{Endpoint: s.Endpoint, Region: s.Region, PathStyle: s.PathStyle}
}

// IsS3 reports whether the run is kept on an object store.
func (r Run) IsS3() bool { return strings.HasPrefix(strings.ToLower(r.StoragePath), "s3://") }

// S3CredentialsVariablePath is the Variable a job's workers read their S3
// keys from by default: the worker group's own path, which the tasks of
// the group may read with their workload identity and no ACL policy
// (nomad/jobs/<job>/<group>). A credentials_variable elsewhere needs a
// policy that grants the job read access to it.
func S3CredentialsVariablePath(jobID string) string {
	return SecretVariablePath(jobID) + "/" + WorkerGroup
}

// S3CredentialsPath is the Variable a spec's workers (and a detached
// tuner) read their S3 keys from, or "" when they get none from a
// Variable (no S3, or CredentialsNode).
func (s *Spec) S3CredentialsPath() string {
	st := s.Run.Storage
	switch {
	case !s.Run.IsS3():
		return ""
	case st == nil || st.Credentials == "" || st.Credentials == CredentialsVariable:
		if st != nil && st.CredentialsVariable != "" {
			return st.CredentialsVariable
		}
		return S3CredentialsVariablePath(s.Name)
	}
	return ""
}

// S3CredentialsTemplate renders the keys in the Variable at path into the
// worker task's environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY),
// where the AWS chain finds them. Nomad holds the task until the Variable
// exists and restarts it when the keys change; the keys are never in the
// job.
func S3CredentialsTemplate(path string) *api.Template {
	tmpl := fmt.Sprintf("{{ with nomadVar %q }}AWS_ACCESS_KEY_ID={{ .%s }}\nAWS_SECRET_ACCESS_KEY={{ .%s }}\n{{ end }}",
		path, S3AccessKeyItem, S3SecretKeyItem)
	return &api.Template{
		EmbeddedTmpl: new(tmpl),
		DestPath:     new(S3CredentialsFile),
		ChangeMode:   new("restart"),
		Perms:        new("0400"),
		Envvars:      new(true),
	}
}

// S3CredentialsCommand is the `nomad var put` line that stores S3 keys for
// job's workers, or "" when the job reads none from a Variable. The keys
// come from the caller's own AWS_* environment variables, so they are
// not written on the command line.
func S3CredentialsCommand(job *api.Job) string {
	path := ""
	for _, g := range job.TaskGroups {
		for _, t := range g.Tasks {
			for _, tp := range t.Templates {
				if deref(tp.DestPath) == S3CredentialsFile {
					path = credentialsPathOf(deref(tp.EmbeddedTmpl))
				}
			}
		}
	}
	if path == "" {
		return ""
	}
	flags := ""
	if r := deref(job.Region); r != "" {
		flags += "-region " + shellQuote(r) + " "
	}
	if ns := deref(job.Namespace); ns != "" {
		flags += "-namespace " + shellQuote(ns) + " "
	}
	return fmt.Sprintf(`nomad var put %s%s %s="$AWS_ACCESS_KEY_ID" %s="$AWS_SECRET_ACCESS_KEY"`,
		flags, shellQuote(path), S3AccessKeyItem, S3SecretKeyItem)
}

// StorageNote says, for a run kept on S3, where its workers get their
// keys: locally the AWS chain, on Nomad the Variable (or the client's
// role). "" for a run kept in a directory.
func StorageNote(s *Spec) string {
	if !s.Run.IsS3() {
		return ""
	}
	if p := s.S3CredentialsPath(); p != "" {
		note := fmt.Sprintf("storage on S3: local workers use the AWS chain (AWS_* variables, ~/.aws); on Nomad they read %s and %s from the Variable %s (nomad var put %s %s=... %s=...)",
			S3AccessKeyItem, S3SecretKeyItem, p, p, S3AccessKeyItem, S3SecretKeyItem)
		if s.Tune != nil {
			note += "; every trial job reads it, which takes an ACL policy granting the trials' workload identities read on it"
		}
		return note
	}
	return "storage on S3: workers use the AWS chain, locally and on Nomad (credentials = \"node\": the client's instance or task role)"
}

// StorageOptionsOf reads the object store options a compiled job gives
// its workers (the train task config's storage block), as Compile wrote
// them or as Nomad's API returns them.
func StorageOptionsOf(job *api.Job) workerenv.StorageOptions {
	var o workerenv.StorageOptions
	if job == nil {
		return o
	}
	for _, g := range job.TaskGroups {
		for _, t := range g.Tasks {
			if t.Driver != Driver {
				continue
			}
			var block map[string]any
			switch v := t.Config["storage"].(type) {
			case []map[string]any:
				if len(v) > 0 {
					block = v[0]
				}
			case []any:
				if len(v) > 0 {
					block, _ = v[0].(map[string]any)
				}
			case map[string]any:
				block = v
			}
			o.Endpoint, _ = block["endpoint"].(string)
			o.Region, _ = block["region"].(string)
			o.PathStyle, _ = block["path_style"].(bool)
			return o
		}
	}
	return o
}

var nomadVarRE = regexp.MustCompile(`nomadVar "([^"]+)"`)

func credentialsPathOf(tmpl string) string {
	if m := nomadVarRE.FindStringSubmatch(tmpl); m != nil {
		return m[1]
	}
	return ""
}

var storageSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "path", Required: true}, {Name: "endpoint"}, {Name: "region"}, {Name: "path_style"},
		{Name: "credentials"}, {Name: "credentials_variable"},
	},
}

// secretName matches the names of settings that would hold a credential.
var secretName = regexp.MustCompile(`(?i)(access_?key|secret|token|password|passwd|credential|session|key_?id|private_?key|auth)`)

// credentialsHelp says where credentials go instead of a spec.
const credentialsHelp = "A spec holds no credentials (it is compiled into the Nomad job, which anyone who can read the job sees). " +
	"Locally the workers use the AWS chain: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment, or a profile in ~/.aws. " +
	"On Nomad they read them from the Nomad Variable nomad/jobs/<run>/" + WorkerGroup + " (`nomad var put nomad/jobs/<run>/" + WorkerGroup + " " +
	S3AccessKeyItem + "=... " + S3SecretKeyItem + "=...`), or from an instance role with credentials = \"" + CredentialsNode + "\"."

// credentialEnv reports whether an environment variable of the spec would
// hand a worker a credential of the AWS chain.
func credentialEnv(k string) bool {
	switch strings.ToUpper(k) {
	case "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN":
		return true
	}
	return false
}

// storage decodes run { storage { ... } } into r.
func (d *decoder) storage(b *hcl.Block, r *Run, ranges *specRanges) {
	c, diags := b.Body.Content(storageSchema)
	for _, diag := range diags {
		if name, ok := unsupportedName(diag); ok && secretName.MatchString(name) {
			diag.Summary = "Credentials in the spec"
			diag.Detail = fmt.Sprintf("%q looks like a credential, and the storage block takes none. %s", name, credentialsHelp)
		}
	}
	// hcl reports unsupported arguments in map order: sort them by line.
	d.diags = append(d.diags, SortDiagnostics(diags)...)
	st := &Storage{}
	a := c.Attributes
	d.storagePath(a["path"], r, ranges)
	if attr := a["endpoint"]; d.nonEmpty(attr, &st.Endpoint) {
		if p := endpointProblem(st.Endpoint); p != "" {
			d.errorf(attr, "Invalid endpoint", "%s", p)
		}
	}
	d.nonEmpty(a["region"], &st.Region)
	d.boolean(a["path_style"], &st.PathStyle)
	d.enum(a["credentials"], &st.Credentials, CredentialsVariable, CredentialsNode)
	if attr := a["credentials_variable"]; d.nonEmpty(attr, &st.CredentialsVariable) {
		if st.Credentials == CredentialsNode {
			d.errorf(attr, "Conflicting credentials", "credentials = %q reads no Variable; remove credentials_variable or the credentials setting.", CredentialsNode)
		}
		if strings.HasPrefix(st.CredentialsVariable, "/") || strings.Contains(st.CredentialsVariable, "//") {
			d.errorf(attr, "Invalid Variable path", "A Nomad Variable path such as \"nomad/jobs/train/s3\" has no leading slash and no empty segment; got %q.", st.CredentialsVariable)
		}
	}
	if !r.IsS3() && r.StoragePath != "" && (st.Endpoint != "" || st.Region != "" || st.PathStyle || st.Credentials != "" || st.CredentialsVariable != "") {
		for _, name := range []string{"endpoint", "region", "path_style", "credentials", "credentials_variable"} {
			if attr := a[name]; attr != nil {
				d.rangeErrorf(attr.NameRange, "Object store option on a directory",
					"%s applies to an s3://bucket/prefix path; %q is a directory.", name, r.StoragePath)
			}
		}
	}
	r.Storage = st
}

// unsupportedName is the attribute name of hcl's "Unsupported argument"
// diagnostic.
func unsupportedName(diag *hcl.Diagnostic) (string, bool) {
	if diag.Summary != "Unsupported argument" {
		return "", false
	}
	_, rest, ok := strings.Cut(diag.Detail, `An argument named "`)
	if !ok {
		return "", false
	}
	name, _, ok := strings.Cut(rest, `"`)
	return name, ok
}

// endpointProblem says what is wrong with an endpoint, in sentences, or
// "": it must be an http or https base URL without credentials, query or
// fragment.
func endpointProblem(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil && strings.Contains(raw, "://"):
		return fmt.Sprintf("endpoint %q is not a URL: %s.", raw, err)
	case err != nil || (u.Scheme != "http" && u.Scheme != "https"): // host:port parses badly
		return fmt.Sprintf("endpoint %q must be an http:// or https:// URL, such as \"https://minio.example:9000\".", raw)
	case u.User != nil:
		return fmt.Sprintf("endpoint %q holds credentials. %s", u.Redacted(), credentialsHelp)
	case u.Host == "":
		return fmt.Sprintf("endpoint %q names no host.", raw)
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Sprintf("endpoint %q must have no query or fragment.", raw)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Sprintf("endpoint %q has port %s, outside 1 to 65535.", raw, p)
		}
	}
	return ""
}
