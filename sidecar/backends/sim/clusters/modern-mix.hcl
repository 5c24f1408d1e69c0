# hetgpu's default heterogeneous cluster: 64 GPUs of four current generations, 16 of each, in
# the server shapes they are sold in (T4 and A10 in 4-GPU PCIe servers, A100 and H100 in 8-GPU
# NVLink servers such as DGX/HGX).
name        = "modern-mix"
description = "4x4 T4, 4x4 A10 (PCIe), 2x8 A100, 2x8 H100 (NVLink), 100 Gb/s Ethernet"

network {
  kind           = "ethernet"
  bandwidth_gbps = 100
}

node_class "t4" {
  gpu           = "Tesla T4"
  gpus_per_node = 4
  count         = 4
  interconnect  = "pcie"
}

node_class "a10" {
  gpu           = "NVIDIA A10"
  gpus_per_node = 4
  count         = 4
  interconnect  = "pcie"
}

node_class "a100" {
  gpu           = "NVIDIA A100-SXM4-40GB"
  gpus_per_node = 8
  count         = 2
  interconnect  = "nvlink"
}

node_class "h100" {
  gpu           = "NVIDIA H100 80GB HBM3"
  gpus_per_node = 8
  count         = 2
  interconnect  = "nvlink"
}
