module github.com/nomad-train/nomad-train

go 1.26

require (
	github.com/shoenig/test v1.13.2
	gonum.org/v1/gonum v0.17.0
)

require github.com/google/go-cmp v0.7.0 // indirect
