//go:build hookonly

package main

// runWrapperIfNamedSo: the hook binary carries no runtime wrapper (its
// config editor links the CDI library); rdma-container-runtime links to
// rdma-cdi.
func runWrapperIfNamedSo() {}
