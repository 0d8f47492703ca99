// Package podnetwork is pod networking: what a claim's or a unit's HCA
// gives a pod in its own network namespace (its netdev moved in, a
// macvlan sub-interface of it, or nothing), with which name, addresses,
// MTU and routes. This package is the pure policy: the node facts that
// keep a netdev for the node, the plan of each attachment, the source
// routing of a pod's interfaces that share a subnet, and address ranges.
// The rest of the feature is in its subpackages:
//
//   - attach: the netlink work, and the Record that undoes it;
//   - networker: the sandbox networker, its NRI relay and its one
//     constructor (New), which both Kubernetes modes wire with a Planner;
//   - sandboxlist: the list of handled sandboxes, the only part the
//     container hook links.
//
// The claim parameters it applies are pkg/apis/rdma/v1alpha1's.
package podnetwork
