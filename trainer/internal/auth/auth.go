// Package auth authenticates a stream connection between two holders of a
// run's shared secret with a mutual HMAC-SHA256 challenge. Collective and
// rendezvous connections run it before anything else; a peer without the
// secret is refused with ErrUnauthenticated.
//
// Each side sends a fresh 32-byte nonce, then the HMAC of its role, its peer's
// nonce and its own nonce; each side checks the other's MAC. Roles differ for
// the dialing and the accepting side, so a MAC cannot be reflected back.
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
	"strings"
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

func (r Role) peer() Role {
	if r == Dialer {
		return Acceptor
	}
	return Dialer
}

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
	if _, err := conn.Write(mine); err != nil {
		return fmt.Errorf("send nonce: %w", err)
	}
	theirs := make([]byte, nonceLen)
	if _, err := io.ReadFull(conn, theirs); err != nil {
		return fmt.Errorf("read nonce: %w", err)
	}
	if _, err := conn.Write(mac(secret, role, theirs, mine)); err != nil {
		return fmt.Errorf("send proof: %w", err)
	}
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(conn, got); err != nil {
		return fmt.Errorf("%w: read proof: %v", ErrUnauthenticated, err)
	}
	if !hmac.Equal(got, mac(secret, role.peer(), mine, theirs)) {
		return ErrUnauthenticated
	}
	return nil
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
// no secret (authentication off).
func ReadSecretFile(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read secret file: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil, fmt.Errorf("secret file %s is empty", path)
	}
	return []byte(s), nil
}
