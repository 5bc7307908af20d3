package objstore_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

func ExampleParseURL() {
	loc, err := objstore.ParseURL("s3://ml-runs/team-a/quickstart/")
	fmt.Println(loc.Bucket, loc.Prefix, err)
	_, err = objstore.ParseURL("s3://KEY:SECRET@ml-runs/x")
	fmt.Println(err)
	// Output:
	// ml-runs team-a/quickstart <nil>
	// storage url: credentials are not allowed in the url; use the AWS credential chain
}

// A store on MinIO at a local endpoint: credentials from AWS_ACCESS_KEY_ID
// and AWS_SECRET_ACCESS_KEY (or a profile), options from the config.
func ExampleOpen() {
	ctx := context.Background()
	st, err := objstore.Open(ctx, "s3://ml-runs/quickstart", objstore.Config{
		Endpoint: "http://127.0.0.1:9000", Region: "us-east-1", PathStyle: true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := st.PutIfAbsent(ctx, "checkpoints/000010/manifest.json", strings.NewReader("{}"))
	fmt.Printf("%x %v\n", res.SHA256, err)
}
