// Package redisstore keeps cws's session state in Redis: the workspace.Store shared by
// every replica. It works with a standalone Redis or a Sentinel-managed primary through
// a go-redis UniversalClient; Redis Cluster is not supported, because the session
// scripts touch keys of several hash slots at once.
//
// # Key schema
//
// Every key starts with Options.Prefix (default "cws:"). {tenant}, {id} and {key} are
// the values as given; tenants cannot contain ':' or '/' (CreateSession refuses them
// with workspace.ErrInvalid), which keeps every key below unambiguous.
//
//	cws:session:{tenant}:{id}   STRING  JSON of workspace.Session. The tenant is part of
//	                                    the key, so another tenant's id is a plain miss.
//	                                    No Redis TTL: the reaper decides when a session
//	                                    ends, because it must remove the container too.
//	cws:tenant:{tenant}:sessions ZSET   the tenant's session ids, scored by CreatedAt in
//	                                    Unix microseconds: the quota count (ZCARD) and the
//	                                    list order (ties by id).
//	cws:sessions                SET     "{tenant}/{id}" of every session, for reconcile
//	                                    and the reaper (AllSessions).
//	cws:state:{tenant}:{id}     HASH    the session's state (editor state, breakpoints):
//	                                    field = state key, value = its bytes. Written only
//	                                    while the session exists (a script checks);
//	                                    DeleteSession deletes it with the session.
//	cws:claim:{key}             STRING  the value in force; PX TTL when claimed with one.
//	cws:rate:{key}:{start}      STRING  INCR counter of the fixed window starting at
//	                                    {start} (Unix milliseconds, aligned to the epoch);
//	                                    expires one window after its first event.
//	cws:audit                   STREAM  one entry per tool call, field "r" = JSON of
//	                                    workspace.AuditRecord; XADD MAXLEN ~ 100000
//	                                    (Options.AuditMaxLen).
//
// The three session keys change together, in Lua scripts: CreateSession checks the id
// (EXISTS → workspace.ErrConflict) and the quota (ZCARD >= max → workspace.ErrQuota),
// then does SET NX + ZADD + SADD; DeleteSession removes the session and both index
// entries. UpdateSession is SET XX; TouchSession rewrites LastUsed under WATCH.
//
// # Announcements
//
// Every CreateSession, UpdateSession, TouchSession and DeleteSession publishes
// "{tenant}/{id}" on the channel cws:sessions:changed, in the same round trip as the
// write (the create and delete scripts publish themselves). WatchSessions follows the
// channel for workspace's per-replica session cache: a (re)subscription, an error, or
// a ping unanswered for 5 s reports the subscription as in doubt, and the cache
// empties itself.
//
// # Errors
//
// A missing session is workspace.ErrNotFound; a failure to reach or use Redis wraps
// workspace.ErrUnavailable (the caller's own cancellation or deadline is returned
// as is).
package redisstore
