module github.com/nomad-train/nomad-train

go 1.26
