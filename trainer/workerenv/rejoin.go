package workerenv

import "time"

// DefaultRejoinTimeout is how long a worker may stay out of a gang that is
// re-forming, unless the run says otherwise, before its launcher presumes
// it hung (frozen, or stuck in its own code) and replaces it: twice the
// default lease TTL, the time in which its peers notice that it is gone.
const DefaultRejoinTimeout = 20 * time.Second
