package api

// ControllersResponse answers GET /v1/controllers: the controllers that run
// once per cluster, under an etcd election among every locationd (today one,
// "recovery").
type ControllersResponse struct {
	Controllers []Controller `json:"controllers"`
}

// Controller is one controller's election and figures.
type Controller struct {
	// Name of the controller: "recovery".
	Name string `json:"name"`
	// Leader is the candidate that leads now, as it last proclaimed itself
	// (null when no locationd runs the controller).
	Leader *ControllerLeader `json:"leader"`
	// Self is the answering locationd's own candidate.
	Self ControllerSelf `json:"self"`
}

// ControllerLeader is the leading candidate, read from its election key.
type ControllerLeader struct {
	// ID is the leading locationd, "<hostname>/<pid>".
	ID string `json:"id"`
	// HTTP is the leader's API address.
	HTTP string `json:"http"`
	// Since: when it won the election ("" until it said so).
	Since       string `json:"since"`
	SinceUnixMs int64  `json:"sinceUnixMs"`
	// Revision is the CreateRevision of its election key (the term's fence).
	Revision int64 `json:"revision"`
	// RecoverOrphans: the leader re-activates orphans (--recover-orphans).
	RecoverOrphans bool `json:"recoverOrphans"`
	// Orphans is the number of objects whose owner is gone, at
	// OrphansRevision, as the leader last proclaimed it (at most every
	// second, when it changes).
	Orphans         int   `json:"orphans"`
	OrphansRevision int64 `json:"orphansRevision"`
	// Asleep is the number of sleeping objects (their records name no
	// owner) at OrphansRevision, as proclaimed with Orphans.
	Asleep int `json:"asleep"`
	// Recovered and Failed count the leader process's recoveries since it
	// started.
	Recovered int64 `json:"recovered"`
	Failed    int64 `json:"failed"`
}

// ControllerSelf is the answering locationd's candidate.
type ControllerSelf struct {
	ID   string `json:"id"`
	HTTP string `json:"http"`
	// Leader: this locationd leads now (since Since).
	Leader      bool   `json:"leader"`
	Since       string `json:"since"`
	SinceUnixMs int64  `json:"sinceUnixMs"`
	// Terms is how often this locationd won the election since it started.
	Terms          int     `json:"terms"`
	ElectionTTLMs  int64   `json:"electionTtlMs"`
	RecoverOrphans bool    `json:"recoverOrphans"`
	RecoveryRate   float64 `json:"recoveryRate"`
	// Recovered and Failed count this process's recoveries.
	Recovered int64 `json:"recovered"`
	Failed    int64 `json:"failed"`
}
