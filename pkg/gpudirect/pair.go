package gpudirect

import (
	"fmt"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// Distance is how far apart an HCA and a GPU are, in NCCL's terms (its
// topology's path types), nearest first.
type Distance int

const (
	// PIX: both below the same bridge.
	PIX Distance = iota
	// PXB: through several bridges of one switch tree, not the host bridge.
	PXB
	// P2C: through a CPU that the GPU reaches over NVLink-C2C and the HCA
	// over its PCIe (NCCL 2.27's PATH_P2C): on Grace-Blackwell, a GPU and
	// an HCA of the same Grace. Only on a C2C platform (C2CPlatform).
	P2C
	// PHB: through the host bridge (the CPU's root complex).
	PHB
	// SYS: under different host bridges.
	SYS
)

func (d Distance) String() string {
	return [...]string{"PIX", "PXB", "P2C", "PHB", "SYS"}[d]
}

// gdrLevel is NCCL's default NCCL_NET_GDR_LEVEL: farther than it, NCCL
// keeps GDR off for the pair and stages through host memory. It is P2C
// since NCCL 2.27, which turned NCCL_NET_GDR_C2C on by default (2.26 had
// it off; older releases have no P2C), and PXB with NCCL_NET_GDR_C2C=0.
// No pair is P2C off a C2C platform, so there the level is PXB either way.
const gdrLevel = P2C

// Pair is an HCA and the GPU nearest to it.
type Pair struct {
	HCA model.PCIPlace
	// GPU is the nearest GPU; its Address is "" when the node has none.
	GPU      model.PCIPlace
	Distance Distance
	// Ingress are the bridges peer-to-peer traffic between the two enters
	// on its way (below their nearest common bridge, on either side):
	// where ACS redirect sends it up to the root complex instead.
	Ingress []model.PCIBridge
}

// Nearest pairs the HCA at hcaAddr with its nearest GPU, the first in
// discovery order among equals. ok is false when g has no place for the
// HCA (a virtual device, or facts not read). On a C2C platform a GPU
// whose CPU is the HCA's (the same NUMA node) is P2C away where PCIe
// alone would put it farther: NCCL's path from the GPU over NVLink-C2C
// to that CPU, then down its PCIe to the HCA.
func Nearest(g model.GPUDirect, hcaAddr string) (Pair, bool) {
	hca, ok := model.PlaceOf(g.HCAs, hcaAddr)
	if !ok || hca.Root == "" {
		return Pair{}, false
	}
	c2c := C2CPlatform(g)
	best := Pair{HCA: hca, Distance: SYS}
	for _, gpu := range g.GPUs {
		p := pairOf(hca, gpu)
		if cpu, ok := c2cCPU(g, gpu); c2c && ok && cpu == hca.NUMANode && p.Distance > P2C {
			// Through the root complex either way: no bridge between
			// them redirects anything.
			p.Distance, p.Ingress = P2C, nil
		}
		if best.GPU.Address == "" || p.Distance < best.Distance {
			best = p
		}
	}
	return best, true
}

// OverC2C reports a pair that meets through the HCA's CPU, the GPU on
// NVLink-C2C (P2C); that CPU is NUMA node p.HCA.NUMANode.
func (p Pair) OverC2C() bool { return p.Distance == P2C }

func pairOf(hca, gpu model.PCIPlace) Pair {
	p := Pair{HCA: hca, GPU: gpu, Distance: SYS}
	if hca.Root != gpu.Root {
		return p
	}
	common := 0
	for common < len(hca.Bridges) && common < len(gpu.Bridges) && hca.Bridges[common].Address == gpu.Bridges[common].Address {
		common++
	}
	p.Ingress = append(append([]model.PCIBridge{}, hca.Bridges[common:]...), gpu.Bridges[common:]...)
	switch {
	case common == 0:
		p.Distance = PHB
	case len(p.Ingress) == 0:
		p.Distance = PIX
	default:
		p.Distance = PXB
	}
	return p
}

// Blockers say what on the pair's way keeps GDR off or sends it through
// the root complex: a GPU too far for NCCL, ACS redirect on a bridge, an
// IOMMU translating either end's DMA. Unknown are bridges whose ACS could
// not be read (not root).
func (p Pair) Blockers() (redirect, iommu []string, far bool, unknown []string) {
	if p.GPU.Address == "" || p.Distance > gdrLevel {
		far = true
	}
	for _, b := range p.Ingress {
		switch {
		case !b.ACS.Readable || b.ACS.Err != "" && !b.ACS.Present:
			unknown = append(unknown, b.Address)
		case b.ACS.Redirects():
			redirect = append(redirect, fmt.Sprintf("%s (ACS %s)", b.Address, b.ACS.Enabled()))
		}
	}
	for _, end := range []model.PCIPlace{p.HCA, p.GPU} {
		if end.Address != "" && end.IOMMUTranslates() {
			iommu = append(iommu, fmt.Sprintf("%s (group %s, %s)", end.Address, end.IOMMUGroup, end.IOMMUType))
		}
	}
	return redirect, iommu, far, unknown
}

// ForHCA is the path an HCA's traffic to its nearest GPU takes: the
// node's path where the GPU is near enough for NCCL (PXB at most) and
// neither an ACS redirect nor an IOMMU translation is on the way, else
// None. A bridge whose ACS could not be read does not count against it.
func ForHCA(g model.GPUDirect, node Node, hcaAddr string) (Path, string) {
	if node.Path == None {
		return None, "the node has no GDR path"
	}
	p, ok := Nearest(g, hcaAddr)
	if !ok {
		return None, "not a PCI function"
	}
	redirect, iommu, far, _ := p.Blockers()
	switch {
	case p.GPU.Address == "":
		return None, "no GPU on the node"
	case far:
		return None, fmt.Sprintf("nearest GPU %s is %s away, %s", p.GPU.Address, p.Distance, FartherThanLevel(g, p.HCA))
	case len(redirect) > 0:
		return None, "ACS redirect on " + strings.Join(redirect, ", ")
	case len(iommu) > 0:
		return None, "IOMMU translates " + strings.Join(iommu, ", ")
	case p.OverC2C():
		return node.Path, fmt.Sprintf("GPU %s at P2C, over NVLink-C2C through the CPU of NUMA node %d", p.GPU.Address, p.HCA.NUMANode)
	}
	return node.Path, fmt.Sprintf("GPU %s at %s", p.GPU.Address, p.Distance)
}

// FartherThanLevel says why a pair farther than NCCL's GDR level is too
// far for hca: off a C2C platform, farther than PXB; on one, neither
// within a PCIe switch nor a GPU on the HCA's own CPU.
func FartherThanLevel(g model.GPUDirect, hca model.PCIPlace) string {
	switch {
	case !C2CPlatform(g):
		return "farther than NCCL's GDR level " + PXB.String()
	case hca.NUMANode < 0:
		return fmt.Sprintf("farther than NCCL's GDR level %s: on this C2C platform the HCA's NUMA node is unknown, so is its CPU", gdrLevel)
	}
	return fmt.Sprintf("farther than NCCL's GDR level %s: on this C2C platform no GPU reaches the HCA's CPU (NUMA node %d) over NVLink-C2C", gdrLevel, hca.NUMANode)
}
