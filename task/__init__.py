"""The qr_v2 harness, laid beside a submission by `qrsub test --local`."""
