package doctor

import (
	"regexp"

	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// semver is an engine's release number.
type semver = model.Version

var versionRE = regexp.MustCompile(`v?\d+\.\d+(?:\.\d+)?`)

// parseSemver reads the first X.Y[.Z] in s ("v2.4.2", "20.10.24+dfsg1", "1.7.0-rc.1").
func parseSemver(s string) (semver, bool) {
	v, err := model.ParseVersion(versionRE.FindString(s))
	return v, err == nil
}
