"""A work-around for rsocket-py 0.4.20 shared by `client.py` and `server.py` (which
import it from their own folder)."""

import rsocket.frame as rsocket_frame
from rsocket.frame import PayloadFrame


def keep_next_flag_on_fragments():
    """Works around rsocket-py 0.4.20 dropping the NEXT flag of a PAYLOAD whose data
    and metadata are both empty: it rebuilds every outgoing frame through
    `rsocket.frame.new_frame_fragment` (fragmentation), which does not copy
    `flags_next`, and the serializer sets NEXT again only for non-empty payloads. An
    empty item or response would go out as a PAYLOAD without NEXT (no value at all)."""
    original = rsocket_frame.new_frame_fragment

    def new_frame_fragment(base_frame, fragment):
        frame = original(base_frame, fragment)
        if isinstance(frame, PayloadFrame) and getattr(base_frame, 'flags_next', False):
            frame.flags_next = True
        return frame

    rsocket_frame.new_frame_fragment = new_frame_fragment

