package objstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// The SDK words an S3 error answer as "https response error StatusCode:
// 404, RequestID: ..., HostID: ..., api error NoSuchBucket: The specified
// bucket does not exist."; a store says "The specified bucket does not
// exist (NoSuchBucket, HTTP 404)", with the SDK's error still in the
// chain (errors.As finds its smithy.APIError and status code).

// apiError is an S3 error answer (or a credential failure), said shortly.
type apiError struct {
	err  error
	text string
}

func (e *apiError) Error() string { return e.text }
func (e *apiError) Unwrap() error { return e.err }

// shorten rewords an error that carries an S3 error answer, or that
// says no credentials were found; others stay.
func shorten(err error) error {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		// The SDK's credential cache words a chain that found nothing so
		// (its provider's reason follows).
		if strings.Contains(err.Error(), "failed to refresh cached credentials") {
			return &apiError{err: err, text: "no AWS credentials found (set AWS_ACCESS_KEY_ID and " +
				"AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or use an instance role): " + err.Error()}
		}
		return err
	}
	what := strings.TrimSuffix(ae.ErrorMessage(), ".")
	detail := ae.ErrorCode()
	if code := statusCode(err); code != 0 {
		detail += fmt.Sprintf(", HTTP %d", code)
	}
	text := detail
	if what != "" {
		text = what + " (" + detail + ")"
	}
	if r := bucketRegion(err); r != "" {
		text += fmt.Sprintf(": the bucket is in region %s (set region in the spec's storage block, or AWS_REGION)", r)
	}
	return &apiError{err: err, text: text}
}

// bucketRegion is the region AWS S3 names (its x-amz-bucket-region
// header) when it refuses a request signed for, or sent to, another
// region: a 301 from the wrong regional endpoint, a 400 for the signing
// region (a Head's answers have no body to say so). "" otherwise.
func bucketRegion(err error) string {
	var re *smithyhttp.ResponseError
	if !errors.As(err, &re) || re.Response == nil {
		return ""
	}
	switch re.HTTPStatusCode() {
	case http.StatusMovedPermanently, http.StatusBadRequest:
		return re.Response.Header.Get("X-Amz-Bucket-Region")
	}
	return ""
}

// shortErrors is the client option (APIOptions) that shortens its
// operations' errors.
func shortErrors(st *middleware.Stack) error {
	return st.Initialize.Add(middleware.InitializeMiddlewareFunc("nomadTrainShortErrors",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
			middleware.InitializeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleInitialize(ctx, in)
			if err != nil {
				err = shorten(err)
			}
			return out, md, err
		}), middleware.Before)
}

// withShortErrors is a client given from outside (New) with shortErrors.
func withShortErrors(client *s3.Client) *s3.Client {
	return s3.New(client.Options(), func(o *s3.Options) {
		o.APIOptions = append(slices.Clip(o.APIOptions), shortErrors)
	})
}
