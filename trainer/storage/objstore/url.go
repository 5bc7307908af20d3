package objstore

import "github.com/nomad-train/nomad-train/trainer/workerenv"

// Location is where a store keeps its objects: a bucket and a key prefix
// (workerenv.S3Location, which the spec's checks share).
type Location = workerenv.S3Location

// ParseURL parses s3://bucket[/prefix] (workerenv.ParseS3URL). The URL
// names a place only: credentials, queries and fragments are refused.
func ParseURL(raw string) (Location, error) { return workerenv.ParseS3URL(raw) }
