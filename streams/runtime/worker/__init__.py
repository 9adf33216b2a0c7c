"""The worker: the Faust app and its batch loop (app), the feedback mirror (mirror), the
rules reactor (reactor), the decider of stateful rules (decider), the run executor
(executor), the rule records it writes (records) and the rulebook follower (follower).
A new rule action goes in a rules module (streams.core.runs.ActionFn); a new kind of step
over the events topics goes here."""
