package gpudirect

import (
	"fmt"
	"strings"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// Distance is how far apart an HCA and a GPU are on PCIe, in NCCL's terms
// (its topology's path types), nearest first.
type Distance int

const (
	// PIX: both below the same bridge.
	PIX Distance = iota
	// PXB: through several bridges of one switch tree, not the host bridge.
	PXB
	// PHB: through the host bridge (the CPU's root complex).
	PHB
	// SYS: under different host bridges.
	SYS
)

func (d Distance) String() string {
	return [...]string{"PIX", "PXB", "PHB", "SYS"}[d]
}

// gdrLevel is NCCL's default NCCL_NET_GDR_LEVEL: farther than PXB, NCCL
// keeps GDR off for the pair and stages through host memory.
const gdrLevel = PXB

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
// HCA (a virtual device, or facts not read).
func Nearest(g model.GPUDirect, hcaAddr string) (Pair, bool) {
	hca, ok := model.PlaceOf(g.HCAs, hcaAddr)
	if !ok || hca.Root == "" {
		return Pair{}, false
	}
	best := Pair{HCA: hca, Distance: SYS}
	for _, gpu := range g.GPUs {
		p := pairOf(hca, gpu)
		if best.GPU.Address == "" || p.Distance < best.Distance {
			best = p
		}
	}
	return best, true
}

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
		return None, fmt.Sprintf("nearest GPU %s is %s away, farther than NCCL's GDR level %s", p.GPU.Address, p.Distance, gdrLevel)
	case len(redirect) > 0:
		return None, "ACS redirect on " + strings.Join(redirect, ", ")
	case len(iommu) > 0:
		return None, "IOMMU translates " + strings.Join(iommu, ", ")
	}
	return node.Path, fmt.Sprintf("GPU %s at %s", p.GPU.Address, p.Distance)
}
