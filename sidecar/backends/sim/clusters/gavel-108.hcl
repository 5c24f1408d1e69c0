# Gavel's simulated cluster (OSDI 2020): 36 K80, 36 P100 and 36 V100 GPUs, as 4-GPU servers.
name        = "gavel-108"
description = "Gavel's 108-GPU simulation cluster: 9 servers each of 4 x K80, 4 x P100, 4 x V100"

network {
  kind           = "ethernet"
  bandwidth_gbps = 25
}

node_class "k80" {
  gpu           = "Tesla K80"
  gpus_per_node = 4
  count         = 9
  interconnect  = "pcie"
}

node_class "p100" {
  gpu           = "Tesla P100-PCIE-16GB"
  gpus_per_node = 4
  count         = 9
  interconnect  = "pcie"
}

node_class "v100" {
  gpu           = "Tesla V100-SXM2-16GB"
  gpus_per_node = 4
  count         = 9
  interconnect  = "nvlink"
}
