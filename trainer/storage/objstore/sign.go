package objstore

import (
	"context"
	"encoding/hex"

	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/smithy-go/middleware"
)

// Signing without a second pass over the data.
//
// Over plain HTTP the SDK signs each PutObject and UploadPart body with its
// SHA-256 (over HTTPS it sends UNSIGNED-PAYLOAD and relies on TLS), and Put
// hashes the same bytes for the caller's digest. So that Put costs no more
// than a plain PutObject, it reads the data once for hashing:
//
//   - a single PutObject's body is the whole object, whose SHA-256 Put has
//     just computed: it is handed to the signer, which then skips its own
//     pass (signed exactly as the SDK would sign it);
//   - a part is sent with UNSIGNED-PAYLOAD, as over HTTPS. The SDK's CRC32
//     checksum, which the server verifies, still guards each part in
//     flight, and the whole object's SHA-256 (kept by the caller, in a
//     checkpoint manifest, checked at restore) guards it end to end.
//     Where the client sends no checksum it need not
//     (AWS_REQUEST_CHECKSUM_CALCULATION=when_required, for a server that
//     refuses them), a part is signed as the SDK signs any body.

// withPayloadHash makes the signer use sum as the request's payload hash.
func withPayloadHash(sum []byte) func(*middleware.Stack) error {
	return payloadHash(hex.EncodeToString(sum))
}

// unsignedPayload sends a request's body as UNSIGNED-PAYLOAD. Like
// withPayloadHash it says so before the SDK's checksum middleware runs:
// over plain HTTP that middleware otherwise hashes the body with SHA-256
// beside its CRC32, for a payload hash the signer would then not use (a
// second pass over every part, as costly as the digest Put keeps).
var unsignedPayload = payloadHash(unsignedPayloadHash)

// unsignedPayloadHash is the payload hash SigV4 signs for a body it does
// not cover.
const unsignedPayloadHash = "UNSIGNED-PAYLOAD"

// payloadHash sets h as the request's payload hash at the first step of
// the stack, before any middleware would compute one.
func payloadHash(h string) func(*middleware.Stack) error {
	return func(st *middleware.Stack) error {
		return st.Initialize.Add(middleware.InitializeMiddlewareFunc("nomadTrainPayloadHash",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
				middleware.InitializeOutput, middleware.Metadata, error) {
				return next.HandleInitialize(v4.SetPayloadHash(ctx, h), in)
			}), middleware.After)
	}
}
