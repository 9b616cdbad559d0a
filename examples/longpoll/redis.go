package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// redisStore is a store that servers share through Redis. Each key is a
// hash of two fields, version and value, under "longpoll:" and the key's
// name. A put changes both and publishes the change on the channel
// "longpoll", to which every server's listen subscribes, in one script:
// a version never exists without its value, nor a change without its
// announcement.
type redisStore struct {
	client *redis.Client
	addr   string
	id     string // in each change it announces, so that its own listen skips them
	opt    redisOptions
	clock  atomic.Pointer[clockSample] // Redis's clock, last read

	// The listener's goroutine's only:
	epoch    string // the epoch key's value when last read
	lostData bool   // the epoch changed, and no up has yet been told so
}

// redisOptions tune a redisStore; a zero field takes its default.
type redisOptions struct {
	// health is how long the subscription may be silent before it is
	// pinged, and how long the ping may go unanswered before the
	// subscription is taken for dead, dropped and made again: a server
	// stops hearing for at most twice this before it knows.
	health time.Duration
	// timeout bounds each command; a notify not stored by then never is.
	timeout time.Duration
	// ttl is how long a key is kept after its last notify; zero keeps it.
	ttl time.Duration
}

const (
	redisPrefix         = "longpoll:"       // of each key's hash
	redisChannel        = "longpoll"        // where puts are announced
	redisEpoch          = "longpoll:-epoch" // a random value set once: gone or changed, the data was lost
	defaultHealth       = 5 * time.Second
	defaultRedisTimeout = time.Second
)

// errLate is the putScript's refusal of a put that reached Redis after its
// deadline.
var errLate = errors.New("longpoll: the notify reached Redis after its deadline and was not stored")

// newRedisStore returns a store on the Redis server at addr. A command
// that fails is not retried: a put whose reply was lost may have been
// made, and retrying it would make it twice; the client that gets its 503
// decides. Nor is a dial, so that while Redis is down a poll or a notify
// is refused at once rather than after go-redis's five tries.
func newRedisStore(addr string, o redisOptions) *redisStore {
	o.health = cmp.Or(o.health, defaultHealth)
	o.timeout = cmp.Or(o.timeout, defaultRedisTimeout)
	return &redisStore{addr: addr, id: rand.Text(), opt: o, client: redis.NewClient(&redis.Options{
		Addr:                     addr,
		MaxRetries:               -1,
		DialerRetries:            1,
		DialTimeout:              o.timeout,
		ConnMaxIdleTime:          o.health, // see listen
		ReadTimeout:              o.timeout,
		WriteTimeout:             o.timeout,
		ContextTimeoutEnabled:    true, // put's deadline is its context's
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})}
}

func (r *redisStore) String() string { return "redis at " + r.addr }

// named says which Redis an error came from.
func (r *redisStore) named(err error) error { return fmt.Errorf("%v: %w", r, err) }

// putScript stores the value as the key's next version and announces it,
// unless Redis's clock is past the put's deadline (ARGV[5], in
// microseconds): a put that waited in a stalled connection until after its
// server answered 503 is refused, not applied over newer values. A key's
// first version is Redis's clock in microseconds, and each put adds one:
// a key forgotten (its TTL, ARGV[6] milliseconds) or lost (a Redis
// restarted without its data) starts again above every version it had,
// since no key takes more than one put a microsecond. The message is
// "ORIGIN VERSION KEYLEN KEYVALUE": the key's length in bytes tells where
// the value starts, so neither needs escaping.
var putScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
if now > tonumber(ARGV[5]) then return redis.error_reply('LATE past its deadline') end
local v = tonumber(redis.call('HGET', KEYS[1], 'version'))
v = string.format('%.0f', v and v + 1 or now)
redis.call('HSET', KEYS[1], 'version', v, 'value', ARGV[2])
if ARGV[6] ~= '0' then redis.call('PEXPIRE', KEYS[1], ARGV[6]) end
redis.call('PUBLISH', ARGV[3], ARGV[4] .. ' ' .. v .. ' ' .. #ARGV[1] .. ' ' .. ARGV[1] .. ARGV[2])
return v
`)

// put's server checks its own polls when put returns (server.notify),
// so the change is announced to the others only: its own listen skips it.
//
// A put that fails may still be on its way: written to a connection that
// stalled rather than closed, it would reach Redis when the connection
// moves again. So it carries a deadline in Redis's clock, and unless it
// never left (a failed dial), put returns its error only once that
// deadline has passed on this side: by then, wherever it is, Redis will
// refuse it.
func (r *redisStore) put(ctx context.Context, key, value string) (*entry, error) {
	start := time.Now()
	c, err := r.readClock(ctx)
	if err != nil {
		return nil, r.named(err)
	}
	deadline := c.at(start.Add(r.opt.timeout))
	cctx, cancel := context.WithDeadline(ctx, start.Add(r.opt.timeout))
	defer cancel()
	v, err := putScript.Run(cctx, r.client, []string{redisPrefix + key}, key, value, redisChannel, r.id,
		deadline, r.opt.ttl.Milliseconds()).Uint64()
	var dial *net.OpError
	switch {
	case err == nil:
		return &entry{Version: v, Value: value}, nil
	case strings.HasPrefix(err.Error(), "LATE"):
		return nil, r.named(errLate)
	case errors.As(err, &dial) && dial.Op == "dial":
	default:
		// c.at is below Redis's clock (clockSample), so once this side's
		// clock has passed the deadline, Redis's has too, give or take how
		// far the two clocks drifted apart since c was read: slack.
		sleep(ctx, time.Until(start.Add(r.opt.timeout+c.slack(start))))
	}
	return nil, r.named(err)
}

// clockSample is Redis's clock as read once: a TIME answer, and when it
// arrived here. Redis answered between the request and the arrival, so
// at any later moment t Redis's clock reads at least micros plus the time
// since local, but for the two clocks' drift apart.
type clockSample struct {
	micros int64
	local  time.Time // with its monotonic reading
}

// at returns Redis's clock at the local time t, at least.
func (c *clockSample) at(t time.Time) int64 { return c.micros + t.Sub(c.local).Microseconds() }

// slack bounds how far Redis's clock can have fallen behind at(t) by t: a
// millisecond, and a thousandth of the time since c was read, ten times
// the drift between two quartz clocks that no one corrects (100 ppm).
// Samples are at most a minute old (readClock), so it is at most 61ms.
func (c *clockSample) slack(t time.Time) time.Duration {
	return time.Millisecond + t.Sub(c.local)/1000
}

// readClock returns Redis's clock as last read, and reads it if it was
// read more than a minute ago: drift is then negligible.
func (r *redisStore) readClock(ctx context.Context) (*clockSample, error) {
	if c := r.clock.Load(); c != nil && time.Since(c.local) < time.Minute {
		return c, nil
	}
	t, err := r.client.Time(ctx).Result()
	if err != nil {
		return nil, err
	}
	c := &clockSample{micros: t.UnixMicro(), local: time.Now()}
	r.clock.Store(c)
	return c, nil
}

func (r *redisStore) get(ctx context.Context, keys ...string) ([]*entry, error) {
	pipe := r.client.Pipeline()
	cmds := make([]*redis.SliceCmd, len(keys))
	for i, key := range keys {
		cmds[i] = pipe.HMGet(ctx, redisPrefix+key, "version", "value")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, r.named(err)
	}
	es := make([]*entry, len(keys))
	for i, cmd := range cmds {
		es[i] = noEntry
		vals := cmd.Val()
		if s, ok := vals[0].(string); ok {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, r.named(err)
			}
			value, _ := vals[1].(string)
			es[i] = &entry{Version: v, Value: value}
		}
	}
	return es, nil
}

// epochScript sets the epoch key if it is missing and returns it, with
// Redis's clock.
var epochScript = redis.NewScript(`
redis.call('SET', KEYS[1], ARGV[1], 'NX')
local t = redis.call('TIME')
return {redis.call('GET', KEYS[1]), t[1], t[2]}
`)

// checkEpoch reads the epoch key, setting it if it is missing, and
// Redis's clock. An epoch that changed since it last looked means that
// Redis lost its data (restarted without persistence, flushed, or evicted
// the key) and what a server kept from before is not what Redis holds:
// lostData is set until an up has been told.
func (r *redisStore) checkEpoch(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.opt.timeout)
	defer cancel()
	vals, err := epochScript.Run(ctx, r.client, []string{redisEpoch}, rand.Text()).Slice()
	if err != nil {
		return err
	}
	epoch, _ := vals[0].(string)
	sec, _ := vals[1].(string)
	usec, _ := vals[2].(string)
	s, err1 := strconv.ParseInt(sec, 10, 64)
	us, err2 := strconv.ParseInt(usec, 10, 64)
	if epoch == "" || err1 != nil || err2 != nil {
		return fmt.Errorf("longpoll: malformed epoch reply %q", vals)
	}
	r.clock.Store(&clockSample{micros: s*1_000_000 + us, local: time.Now()})
	if r.epoch != "" && r.epoch != epoch {
		r.lostData = true
	}
	r.epoch = epoch
	return nil
}

// up checks the epoch, then tells l that it is up.
func (r *redisStore) up(ctx context.Context, l listener) error {
	if err := r.checkEpoch(ctx); err != nil {
		return err
	}
	if err := l.up(ctx, r.lostData); err != nil {
		return err
	}
	r.lostData = false
	return nil
}

// listen subscribes to the channel on a goroutine of its own, until stop
// is called. Each confirmation of the subscription, the first one
// included, is an up: changes made before it may have been missed.
//
// A subscription can die without a word: a NAT or a load balancer that
// drops the flow leaves this side's connection open and silent for ever.
// So a silence of opt.health is answered with a ping, and a ping not
// answered within as long with a new subscription on a new connection,
// the listener told it was lost meanwhile. What kills the subscription's
// connection has likely killed the client's idle ones too, and each would
// cost a command its timeout to find out; but none of them has been used
// for opt.health by then (nothing came through since a whole period before
// the ping was answered by silence), so the pool, whose ConnMaxIdleTime is
// opt.health, dials anew rather than reuse them. The epoch is checked at
// each subscription, and again each opt.health while hearing.
func (r *redisStore) listen(l listener) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex // guards ps, which stop closes to end a Receive
	var ps *redis.PubSub
	subscribe := func() *redis.PubSub {
		mu.Lock()
		defer mu.Unlock()
		if ps != nil {
			ps.Close()
		}
		if ctx.Err() == nil {
			ps = r.client.Subscribe(ctx, redisChannel)
		}
		return ps
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		p := subscribe()
		pinged, hearing := false, false
		checked := time.Now()
		for ctx.Err() == nil {
			if hearing && time.Since(checked) >= r.opt.health {
				checked = time.Now()
				if r.checkEpoch(ctx) == nil && r.lostData {
					_ = r.up(ctx, l) // failing, it is tried again at the next check
				}
			}
			msg, err := p.ReceiveTimeout(ctx, r.opt.health)
			var ne net.Error
			switch timeout := errors.As(err, &ne) && ne.Timeout(); {
			case ctx.Err() != nil:
				return
			case timeout && !pinged:
				// Silence: a quiet channel, or a dead connection. Ask.
				if err = p.Ping(ctx); err == nil {
					pinged = true
					continue
				}
				fallthrough
			case err != nil:
				if errors.As(err, &ne) && ne.Timeout() {
					err = fmt.Errorf("no answer to a ping within %v", r.opt.health)
				}
				l.lost(r.named(err))
				pinged, hearing = false, false
				sleep(ctx, 100*time.Millisecond)
				p = subscribe() // on a new connection, whatever became of the old one
				continue
			}
			pinged = false
			switch m := msg.(type) {
			case *redis.Subscription:
				// Messages wait in the connection while up reads the keys.
				if err := r.up(ctx, l); err != nil {
					// Subscribed but unable to read: start again.
					l.lost(r.named(err))
					hearing = false
					sleep(ctx, 100*time.Millisecond)
					p = subscribe()
					continue
				}
				hearing, checked = true, time.Now()
			case *redis.Message:
				if origin, key, e, err := parseChange(m.Payload); err == nil && origin != r.id {
					l.changed(key, e)
				}
			}
		}
	})
	return func() {
		cancel()
		mu.Lock()
		if ps != nil {
			ps.Close() // ends a Receive waiting for a message
		}
		mu.Unlock()
		wg.Wait()
	}
}

// parseChange reads a message of putScript.
func parseChange(msg string) (origin, key string, e *entry, err error) {
	origin, rest, ok1 := strings.Cut(msg, " ")
	version, rest, ok2 := strings.Cut(rest, " ")
	keyLen, rest, ok3 := strings.Cut(rest, " ")
	v, err1 := strconv.ParseUint(version, 10, 64)
	n, err2 := strconv.Atoi(keyLen)
	if !ok1 || !ok2 || !ok3 || err1 != nil || err2 != nil || n < 0 || n > len(rest) {
		return "", "", nil, errors.New("longpoll: malformed change: " + msg)
	}
	return origin, rest[:n], &entry{Version: v, Value: rest[n:]}, nil
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
