package model

// The CDI kind a node's devices get when the config names none:
// rdma.example.com/hca. The spec writer and the config default to it.
const (
	DefaultVendor = "rdma.example.com"
	DefaultClass  = "hca"
)
