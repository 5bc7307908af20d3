module github.com/nomad-train/nomad-train

go 1.26.0

require (
	github.com/hashicorp/go-hclog v1.6.3
	github.com/shoenig/test v1.13.2
	golang.org/x/sys v0.50.0
)

require (
	github.com/fatih/color v1.13.0 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/mattn/go-colorable v0.1.12 // indirect
	github.com/mattn/go-isatty v0.0.14 // indirect
)
