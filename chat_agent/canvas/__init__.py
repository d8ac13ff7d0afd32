"""The artifact and its versions, quick actions, memories and reflection, titles, export."""
