package recovery

import "github.com/meshloc/meshloc/pkg/authority"

// SetBeforeWrite makes c call f with each step's recoveries after their
// records were read and before they are written. Set it before Run.
func SetBeforeWrite(c *Controller, f func([]authority.RecoverRequest)) { c.beforeWrite = f }
