package e2bapi

import "time"

// NetworkConfig is NewSandbox.network.
type NetworkConfig struct {
	// AllowPublicTraffic defaults to true on the API side when nil.
	AllowPublicTraffic *bool    `json:"allowPublicTraffic,omitempty"`
	AllowOut           []string `json:"allowOut,omitempty"`
	DenyOut            []string `json:"denyOut,omitempty"`
}

// CreateRequest describes a sandbox to create.
type CreateRequest struct {
	// TemplateID is required (the SDK default is "base").
	TemplateID string
	// Timeout is the sandbox lifetime; rounded up to whole seconds. Zero leaves
	// the API default (15 s); the SDKs send 300 s.
	Timeout  time.Duration
	Metadata map[string]string
	EnvVars  map[string]string
	// Secure makes the API issue an envd access token. Nil means true, as in
	// the SDKs.
	Secure *bool
	// AllowInternetAccess is sent as allow_internet_access. Nil means true.
	AllowInternetAccess *bool
	// AutoPause pauses instead of killing at the timeout.
	AutoPause bool
	Network   *NetworkConfig
}

type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             int64             `json:"timeout,omitempty"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	EnvVars             map[string]string `json:"envVars,omitempty"`
	AutoPause           bool              `json:"autoPause"`
	Secure              bool              `json:"secure"`
	AllowInternetAccess bool              `json:"allow_internet_access"`
	Network             *NetworkConfig    `json:"network,omitempty"`
}

// Sandbox is the API's answer to create and connect.
type Sandbox struct {
	TemplateID         string `json:"templateID"`
	SandboxID          string `json:"sandboxID"`
	ClientID           string `json:"clientID"`
	EnvdVersion        string `json:"envdVersion"`
	Alias              string `json:"alias,omitempty"`
	EnvdAccessToken    string `json:"envdAccessToken,omitempty"`
	TrafficAccessToken string `json:"trafficAccessToken,omitempty"`
	Domain             string `json:"domain,omitempty"`
}

// Lifecycle is SandboxDetail.lifecycle.
type Lifecycle struct {
	AutoResume bool   `json:"autoResume"`
	OnTimeout  string `json:"onTimeout"` // "kill" or "pause"
}

// State of a sandbox.
const (
	StateRunning = "running"
	StatePaused  = "paused"
)

// SandboxDetail is the answer of Get and, without token, network and
// lifecycle, an element of List.
type SandboxDetail struct {
	TemplateID          string            `json:"templateID"`
	Alias               string            `json:"alias,omitempty"`
	SandboxID           string            `json:"sandboxID"`
	ClientID            string            `json:"clientID"`
	StartedAt           time.Time         `json:"startedAt"`
	EndAt               time.Time         `json:"endAt"`
	EnvdVersion         string            `json:"envdVersion"`
	EnvdAccessToken     string            `json:"envdAccessToken,omitempty"`
	AllowInternetAccess *bool             `json:"allowInternetAccess,omitempty"`
	Domain              string            `json:"domain,omitempty"`
	CPUCount            int               `json:"cpuCount"`
	MemoryMB            int               `json:"memoryMB"`
	DiskSizeMB          int               `json:"diskSizeMB"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	State               string            `json:"state"`
	Network             *NetworkConfig    `json:"network,omitempty"`
	Lifecycle           *Lifecycle        `json:"lifecycle,omitempty"`
}

// ListOptions filters GET /v2/sandboxes.
type ListOptions struct {
	// Metadata keeps sandboxes whose metadata has all these pairs.
	Metadata map[string]string
	// States filters by state (StateRunning, StatePaused); empty means all.
	States []string
	// Limit is the page size (1..100; 0 = API default 100).
	Limit int
	// NextToken continues a previous page.
	NextToken string
}

// ListPage is one page of List.
type ListPage struct {
	Sandboxes []SandboxDetail
	// NextToken is the X-Next-Token header; empty on the last page.
	NextToken string
}

// ErrorBody is E2B's control-plane error body.
type ErrorBody struct {
	Code      int    `json:"code"`
	Message   string `json:"message"`
	ErrorCode string `json:"error_code,omitempty"`
}
