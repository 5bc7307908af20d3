// Package s3test starts a real S3 server process for tests: versitygw's
// POSIX gateway, on 127.0.0.1 with a free port, a temporary data directory
// and fixed test credentials. The process is stopped by its PID when the
// test ends.
//
// The server binary is the file named by NOMAD_TRAIN_TEST_S3_SERVER, or
// versitygw on PATH. When neither is there, Start skips the test with a
// message; .ci/run installs versitygw and sets the variable, so CI runs
// these tests. A variable that names a missing file fails the test: a
// broken CI set-up must not turn into skips.
//
//	srv := s3test.Start(t)
//	client := srv.Client(t)
//	_, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: &srv.Bucket, ...})
package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Fixed test credentials and region. They are not secrets: the server
// lives only as long as one test, bound to the loopback interface.
const (
	AccessKey = "nomad-train-test"
	SecretKey = "nomad-train-test-secret"
	Region    = "us-east-1"
)

// Version is the versitygw release the tests are run with (.ci/run
// installs it).
const Version = "v1.8.0"

// EnvServer names the environment variable that points at the server
// binary (versitygw).
const EnvServer = "NOMAD_TRAIN_TEST_S3_SERVER"

// EnvNice names the environment variable that, set to a niceness (1 to
// 19), starts the server under nice(1): on a machine where the server
// shares the benchmark's cores, a server at the lowest priority stands in
// for one on another machine, which takes no CPU from the training
// (BENCHMARKS.md, B6a).
const EnvNice = "NOMAD_TRAIN_TEST_S3_NICE"

// startTimeout bounds the wait for the server to answer. Generous: the
// tests run on loaded 2-core machines.
const startTimeout = 60 * time.Second

// Server is one running S3 server with one bucket made for the test.
type Server struct {
	// Endpoint is the server's base URL, http://127.0.0.1:<port>.
	Endpoint string
	// Bucket is a fresh, empty bucket.
	Bucket string
	// AccessKey, SecretKey and Region are what a client signs with.
	AccessKey, SecretKey, Region string
	// Dir is the server's data directory; each bucket is a folder in it.
	Dir string
	// PID is the server process's id.
	PID int
	// ConditionalWrites says whether the server refuses a write with
	// If-None-Match: "*" to a key that exists, on PutObject and on
	// CompleteMultipartUpload. versitygw (1.8) does; tests assert it, so
	// a client that stops sending the header fails rather than skips.
	ConditionalWrites bool

	args    []string // how the process is started
	logPath string
	mu      sync.Mutex
	proc    *process // the one running, or nil while Outage has it down
}

// process is one run of the server.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// Binary returns the path of the S3 server binary, or "" when there is
// none. The error reports a variable that names a file that is not there.
func Binary() (string, error) {
	if p := os.Getenv(EnvServer); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s: %w", EnvServer, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	return "", nil
}

// Start starts a server for the test and makes a bucket on it. It skips
// the test when there is no server binary.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	if bin == "" {
		t.Skipf("s3test: no S3 server: set %s or put versitygw on PATH "+
			"(go install github.com/versity/versitygw/cmd/versitygw@%s)", EnvServer, Version)
	}
	if _, err := niceness(); err != nil {
		t.Fatalf("s3test: %v", err)
	}
	// A free port can be taken between our probe and the server's bind;
	// try a few times.
	var lastErr error
	for range 3 {
		srv, err := start(t, bin)
		if err == nil {
			srv.Bucket = srv.NewBucket(t)
			return srv
		}
		lastErr = err
	}
	t.Fatalf("s3test: %v", lastErr)
	return nil
}

func start(t testing.TB, bin string) (*Server, error) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		return nil, fmt.Errorf("make data directory: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// --keep-alive: versitygw closes each connection after one request
	// unless told otherwise, where AWS S3 and the other servers keep it
	// open; without it every request of a test or benchmark pays a new TCP
	// connection, and a client that leaves response bodies unread goes
	// unnoticed.
	args := []string{bin, "--port", addr, "--region", Region, "--keep-alive", "--quiet", "posix", data}
	if n, _ := niceness(); n != "" {
		args = append([]string{"nice", "-n", n}, args...) // nice execs the server: the PID stays its
	}
	srv := &Server{
		Endpoint:  "http://" + addr,
		AccessKey: AccessKey, SecretKey: SecretKey, Region: Region,
		Dir: data, ConditionalWrites: true,
		args: args, logPath: filepath.Join(dir, "server.log"),
	}
	if err := srv.run(); err != nil {
		return nil, err
	}
	t.Cleanup(func() { srv.stop(t) })
	return srv, nil
}

// run starts the server process and waits until it answers.
func (s *Server) run() error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open server log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(s.args[0], s.args[1:]...)
	cmd.Env = append(os.Environ(),
		"ROOT_ACCESS_KEY_ID="+AccessKey, "ROOT_SECRET_ACCESS_KEY="+SecretKey)
	cmd.Stdout, cmd.Stderr = logf, logf
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.args[0], err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	if err := waitReady(s.Endpoint, p.exited); err != nil {
		_ = cmd.Process.Kill()
		<-p.exited
		log, _ := os.ReadFile(s.logPath)
		return fmt.Errorf("server on %s: %w; its log:\n%s", s.Endpoint, err, tail(log, 2000))
	}
	s.mu.Lock()
	s.proc, s.PID = p, cmd.Process.Pid
	s.mu.Unlock()
	return nil
}

// stop ends the running server, if any.
func (s *Server) stop(t testing.TB) {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p != nil {
		stopProcess(t, p.cmd, p.exited)
	}
}

// Outage kills the server (SIGKILL, as a crash or a node's loss would),
// keeps it down for down, and starts it again on the same address with
// the same data, as a restart of the server looks to its clients: their
// requests are refused meanwhile, and their open connections broken.
func (s *Server) Outage(t testing.TB, down time.Duration) {
	t.Helper()
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p == nil {
		t.Errorf("s3test: Outage of a server that is down")
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	time.Sleep(down)
	if err := s.run(); err != nil {
		t.Errorf("s3test: restart after an outage: %v", err)
	}
}

// niceness returns EnvNice's value, "" when unset, or why it is refused.
func niceness() (string, error) {
	v := os.Getenv(EnvNice)
	if v == "" {
		return "", nil
	}
	if n, err := strconv.Atoi(v); err != nil || n < 1 || n > 19 {
		return "", fmt.Errorf("%s=%q: want a niceness from 1 to 19", EnvNice, v)
	}
	return v, nil
}

// stopGrace is how long a server asked to stop may take before it is
// killed. versitygw's graceful stop was seen to take more than 10 s
// after some tests (whose clients still held connections); its data is
// the test's to throw away, so a test waits no longer than this.
const stopGrace = 2 * time.Second

// stopProcess ends the server by its PID: SIGINT, then SIGKILL if it has
// not exited after stopGrace.
func stopProcess(t testing.TB, cmd *exec.Cmd, exited <-chan struct{}) {
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case <-exited:
		return
	case <-time.After(stopGrace):
	}
	t.Logf("s3test: server %d ignored SIGINT; killing it", cmd.Process.Pid)
	_ = cmd.Process.Kill()
	<-exited
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls the endpoint until it answers HTTP at all (an
// unauthenticated request gets an S3 error document, which is an answer).
func waitReady(endpoint string, exited <-chan struct{}) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(startTimeout)
	for {
		resp, err := client.Get(endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-exited:
			return errors.New("server exited before answering")
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer after %s: %w", startTimeout, err)
		}
	}
}

// Client returns an S3 client for the server, signing with the test
// credentials, addressing buckets by path, and sending the checksums
// config.LoadDefaultConfig's clients send (a CRC32 with every upload), as
// objstore.Open's do: a server given none computes its own, on the CPU
// the tests share with it.
func (s *Server) Client(t testing.TB) *s3.Client {
	t.Helper()
	return s3.New(s3.Options{
		BaseEndpoint:               aws.String(s.Endpoint),
		Region:                     s.Region,
		Credentials:                credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		UsePathStyle:               true,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenSupported,
	})
}

// SetKeys points this test process's AWS chain at the server's keys (and
// at no shared config file), for the duration of the test: what an
// s3:// storage path opened in the test then authenticates with. The
// endpoint is left to the caller's storage options.
func (s *Server) SetKeys(t interface {
	Setenv(key, value string)
	TempDir() string
}) {
	t.Setenv("AWS_ACCESS_KEY_ID", s.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s.SecretKey)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
}

// SetKeysOnly is SetKeys with nothing else of the AWS chain: no endpoint,
// region or profile from the environment, and no instance metadata, so
// that what reaches the server must come from a storage block's options.
func (s *Server) SetKeysOnly(t interface {
	Setenv(key, value string)
	TempDir() string
}) {
	s.SetKeys(t)
	for _, k := range []string{"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// NewBucket makes another empty bucket on the server and returns its name.
func (s *Server) NewBucket(t testing.TB) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "test-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if _, err := s.Client(t).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &name}); err != nil {
		t.Fatalf("s3test: create bucket %s: %v", name, err)
	}
	return name
}

func tail(b []byte, n int) []byte {
	b = bytes.TrimSpace(b)
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
