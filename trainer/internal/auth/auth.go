// Package auth authenticates a stream connection between two holders of a
// run's shared secret with a mutual HMAC-SHA256 challenge. Collective and
// rendezvous connections run it before anything else; a peer without the
// secret is refused with ErrUnauthenticated.
//
// The dialer sends a fresh 32-byte nonce; the acceptor answers with its own
// nonce and the HMAC of its role and both nonces; the dialer checks that
// proof and sends its own (its role, both nonces), and may send its first
// requests right behind it: the acceptor reads nothing else before the
// dialer's proof checks out. That is one round trip before the dialer can
// talk, where exchanging nonces and then proofs took two. Roles differ for
// the two sides, so a proof cannot be reflected back.
package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrUnauthenticated is returned when the peer does not prove it holds the secret.
var ErrUnauthenticated = errors.New("peer failed authentication")

const nonceLen = 32

// Role says which end of the connection this side is.
type Role byte

const (
	Dialer   Role = 'D'
	Acceptor Role = 'A'
)

// Handshake runs the mutual challenge on conn within timeout. An empty secret
// disables authentication (both sides must agree on that).
func Handshake(conn net.Conn, secret []byte, role Role, timeout time.Duration) error {
	if len(secret) == 0 {
		return nil
	}
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return fmt.Errorf("set handshake deadline: %w", err)
	}
	defer conn.SetDeadline(time.Time{})

	mine := make([]byte, nonceLen)
	if _, err := rand.Read(mine); err != nil {
		return fmt.Errorf("make nonce: %w", err)
	}
	if role == Dialer {
		proof, err := challenge(conn, secret, mine)
		if err != nil {
			return err
		}
		if _, err := conn.Write(proof); err != nil {
			return fmt.Errorf("send proof: %w", err)
		}
		return nil
	}
	theirs := make([]byte, nonceLen)
	if _, err := io.ReadFull(conn, theirs); err != nil {
		return fmt.Errorf("%w: read nonce: %v", ErrUnauthenticated, err)
	}
	if _, err := conn.Write(append(mine, mac(secret, Acceptor, theirs, mine)...)); err != nil {
		return fmt.Errorf("send nonce and proof: %w", err)
	}
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(conn, got); err != nil {
		return fmt.Errorf("%w: read proof: %v", ErrUnauthenticated, err)
	}
	if !hmac.Equal(got, mac(secret, Dialer, mine, theirs)) {
		return ErrUnauthenticated
	}
	return nil
}

// Dial runs the dialer's side of the handshake on conn within timeout up
// to its last step: it checks the acceptor's proof and returns its own,
// which the caller sends ahead of its first bytes (in the same write). The
// acceptor waits for it no longer than its own timeout. An empty secret
// disables authentication and gives an empty proof.
func Dial(conn net.Conn, secret []byte, timeout time.Duration) ([]byte, error) {
	if len(secret) == 0 {
		return nil, nil
	}
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, fmt.Errorf("set handshake deadline: %w", err)
	}
	defer conn.SetDeadline(time.Time{})
	mine := make([]byte, nonceLen)
	if _, err := rand.Read(mine); err != nil {
		return nil, fmt.Errorf("make nonce: %w", err)
	}
	return challenge(conn, secret, mine)
}

// challenge sends the dialer's nonce, checks the acceptor's answer and
// returns the dialer's proof.
func challenge(conn net.Conn, secret, mine []byte) ([]byte, error) {
	if _, err := conn.Write(mine); err != nil {
		return nil, fmt.Errorf("send nonce: %w", err)
	}
	got := make([]byte, nonceLen+sha256.Size) // the acceptor's nonce and proof
	if _, err := io.ReadFull(conn, got); err != nil {
		return nil, fmt.Errorf("%w: read nonce and proof: %v", ErrUnauthenticated, err)
	}
	theirs := got[:nonceLen]
	if !hmac.Equal(got[nonceLen:], mac(secret, Acceptor, mine, theirs)) {
		return nil, ErrUnauthenticated
	}
	return mac(secret, Dialer, theirs, mine), nil
}

func mac(secret []byte, role Role, peerNonce, ownNonce []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte("nomad-train/auth/v1"))
	h.Write([]byte{byte(role)})
	h.Write(peerNonce)
	h.Write(ownNonce)
	return h.Sum(nil)
}

// NewSecret returns a fresh random secret, hex-encoded.
func NewSecret() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return fmt.Sprintf("%x", b)
}

// ReadSecretFile reads a secret written by a launcher. An empty path means
// no secret (authentication off). A secret handed down as an inherited
// descriptor (/proc/self/fd/N, as the local launcher does) is marked
// close-on-exec once read, so that the worker's own children (a Python
// training command) do not inherit it.
func ReadSecretFile(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read secret file: %w", err)
	}
	if fd, ok := strings.CutPrefix(path, "/proc/self/fd/"); ok {
		if n, err := strconv.Atoi(fd); err == nil && n > 2 {
			syscall.CloseOnExec(n)
		}
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil, fmt.Errorf("secret file %s is empty", path)
	}
	return []byte(s), nil
}
