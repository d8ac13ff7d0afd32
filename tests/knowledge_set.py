"""A small labelled set for knowledge-base retrieval: 22 Markdown documents of three sections
each and 76 questions, each with the document and a phrase of the section that answers it. The questions are worded as users ask:
some with the documents' words, some with others (synonyms, other spellings, typos), so that
full text alone does not find everything. Used by tests/test_knowledge_retrieval.py and
bench/knowledge.py."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Question:
    text: str
    filename: str
    phrase: str  # a phrase of the chunk that answers it


def _doc(title: str, *sections: tuple[str, str]) -> str:
    return f"# {title}\n\n" + "\n\n".join(f"## {heading}\n\n{body}" for heading, body in sections) + "\n"


DOCUMENTS: dict[str, str] = {
    "leave-policy.md": _doc(
        "Leave policy",
        ("Annual leave", "Every full-time employee receives twenty-eight days of annual leave per calendar year, "
         "including public holidays. Part-time staff receive a pro-rata allowance based on contracted hours. Up to "
         "five unused days may be carried over into the first quarter of the following year; anything beyond that "
         "expires on the thirty-first of March without compensation."),
        ("Sick leave", "Employees who are unwell must notify their line manager before ten o'clock on the first "
         "day of absence. A medical certificate is required from the fourth consecutive calendar day. Sick leave "
         "is paid in full for up to twelve weeks in any rolling twelve-month period, after which statutory sick "
         "pay applies."),
        ("Parental leave", "Birth parents are entitled to twenty-six weeks of fully paid maternity leave, and "
         "partners to six weeks of paid paternity leave that can be taken in blocks of one week. Adoptive parents "
         "receive the same entitlements from the date of placement. Requests should be made at least eight weeks "
         "before the intended start date."),
    ),
    "expenses.md": _doc(
        "Expense policy",
        ("Submitting claims", "Expense claims are submitted through the finance portal within thirty days of the "
         "purchase. Each claim must include an itemised receipt; a card statement alone is not accepted. Claims "
         "above five hundred euros need the approval of a budget holder before they are reimbursed."),
        ("Meals and hospitality", "When travelling, employees may claim up to forty-five euros per day for meals. "
         "Alcohol is not reimbursable except when entertaining clients, where the most senior employee present "
         "pays and claims. The names of all guests and the business purpose must be recorded on the claim."),
        ("Mileage", "Use of a private car for business trips is compensated at thirty cents per kilometre. The "
         "commute between home and the usual office does not count. Drivers must hold business-use insurance and "
         "upload the policy document once a year."),
    ),
    "it-security.md": _doc(
        "IT security guidelines",
        ("Passwords", "Passwords must be at least fourteen characters long and unique for every service. The "
         "company password manager is mandatory for storing credentials. Passwords are never shared by email or "
         "chat, and a password that may have been exposed must be changed immediately."),
        ("Phishing", "Suspicious emails are reported with the Report Phish button in the mail client. Never open "
         "attachments or follow links from unknown senders. The security team runs simulated phishing campaigns "
         "every quarter; staff who click receive a short refresher course."),
        ("Lost devices", "A lost or stolen laptop or phone must be reported to the service desk within one hour. "
         "The device is then wiped remotely. Full-disk encryption is enabled on every company laptop, so the data "
         "stays protected while the device is missing."),
    ),
    "onboarding.md": _doc(
        "Onboarding checklist",
        ("Before day one", "The hiring manager orders a laptop at least ten working days before the start date and "
         "asks facilities for a desk and an access badge. The new colleague receives a welcome email with the "
         "address, the arrival time and the name of their onboarding buddy."),
        ("First week", "During the first week the new hire meets their team, completes the mandatory security and "
         "privacy training, and sets up two-factor authentication. The buddy schedules a lunch and shows where "
         "documentation, tickets and the team calendar live."),
        ("Probation", "The probation period lasts six months. The manager holds check-in conversations after one, "
         "three and five months and records the outcome in the HR system. Either side may end the contract during "
         "probation with two weeks of notice."),
    ),
    "travel.md": _doc(
        "Business travel",
        ("Booking", "All flights, trains and hotels are booked through the travel agency portal. Economy class is "
         "standard for flights under six hours; business class may be booked for longer intercontinental flights "
         "with director approval. Trains are preferred over flights for journeys under four hours."),
        ("Hotels", "Hotel rooms are limited to one hundred and fifty euros per night in most cities and two hundred "
         "and twenty euros in London, Paris, New York and Tokyo. Staying with friends instead of a hotel is allowed "
         "and may be compensated with a small gift allowance."),
        ("Travel insurance", "Every business trip is covered by the company travel insurance, including medical "
         "emergencies, lost luggage and cancellations. The insurance card can be downloaded from the intranet and "
         "should be carried during the trip. Private extensions of a business trip are not covered."),
    ),
    "remote-work.md": _doc(
        "Remote work",
        ("Eligibility", "Employees may work remotely up to three days per week after completing their probation "
         "period. Roles that require physical presence, such as laboratory or reception staff, are excluded. "
         "Working from another country for more than twenty days a year needs approval from HR and tax advisers."),
        ("Equipment", "The company provides a monitor, keyboard, mouse and headset for the home office. A one-off "
         "allowance of three hundred euros covers an ergonomic chair or desk. Equipment remains company property "
         "and is returned when the employment ends."),
        ("Availability", "Remote workers are reachable during core hours from ten to four. Calendars must show "
         "working location and availability. Video is expected to be switched on in team meetings unless the "
         "connection is poor."),
    ),
    "coffee-machine.md": _doc(
        "Barista Pro 3000 manual",
        ("Descaling", "Descale the machine every two months, or when the orange drop symbol lights up. Fill the "
         "water tank with half a litre of water and one sachet of descaling agent, place a large container under "
         "the spout and hold the steam and hot water buttons together for five seconds to start the programme."),
        ("Grind settings", "The burr grinder has fifteen settings. Use setting three to five for espresso and ten "
         "to twelve for filter coffee. Change the setting only while the grinder is running, otherwise beans can "
         "jam between the burrs and damage the motor."),
        ("Error codes", "Error E4 means the brewing unit is not inserted correctly; remove it, rinse it and push "
         "it back until it clicks. Error E7 indicates an overheated boiler: switch the machine off and let it cool "
         "for thirty minutes. Any other code requires a service visit."),
    ),
    "city-bike.md": _doc(
        "Urban e-bike owner's guide",
        ("Battery care", "Charge the lithium battery at room temperature and never below zero degrees. For storage "
         "over the winter keep it between forty and sixty percent and check it monthly. A full charge takes about "
         "four and a half hours and gives a range of seventy to ninety kilometres."),
        ("Tyre pressure", "Inflate the tyres to between three and a half and four bar. Lower pressure gives more "
         "comfort on cobblestones but increases the risk of pinch flats. Check the pressure every two weeks, as "
         "tyres lose air slowly even when the bike is not ridden."),
        ("Brakes", "The hydraulic disc brakes need new pads when the lining is thinner than one millimetre. Squeaking "
         "after rain is normal and disappears after a few stops. Never oil the discs; contaminated rotors must be "
         "cleaned with isopropyl alcohol."),
    ),
    "bread-recipes.md": _doc(
        "Bread recipes",
        ("Sourdough loaf", "Mix five hundred grams of bread flour with three hundred and fifty grams of water and "
         "one hundred grams of active starter. After an hour add ten grams of salt, then stretch and fold four "
         "times at half-hour intervals. Proof overnight in the fridge and bake at two hundred and fifty degrees in "
         "a covered pot."),
        ("Focaccia", "For focaccia, use a very wet dough with eighty percent hydration and plenty of olive oil. "
         "Press dimples into the dough with oiled fingers, scatter rosemary and flaky salt over it, and bake in a "
         "hot oven for about twenty-five minutes until golden."),
        ("Troubleshooting", "A dense crumb usually means the dough was under-proofed or the starter was weak. A pale "
         "crust points to an oven that was not hot enough or too much steam late in the bake. Large holes under "
         "the crust come from shaping too loosely."),
    ),
    "gardening.md": _doc(
        "Vegetable gardening",
        ("Tomatoes", "Sow tomato seeds indoors six to eight weeks before the last frost and plant them out once "
         "night temperatures stay above ten degrees. Pinch out side shoots on cordon varieties and water at the "
         "base to prevent blight. Feed weekly with a high-potash fertiliser once the first fruits set."),
        ("Composting", "A good compost heap mixes green material such as grass clippings with brown material such "
         "as cardboard and dry leaves in roughly equal parts. Turn it every few weeks to add air. Finished compost "
         "is dark, crumbly and smells of earth, usually after six to twelve months."),
        ("Slugs", "Slugs are controlled without chemicals by beer traps, copper tape around pots and regular "
         "evening collection with a torch. Encouraging hedgehogs, frogs and birds keeps numbers down over time. "
         "Avoid watering in the evening, because damp soil at night attracts them."),
    ),
    "astronomy.md": _doc(
        "Backyard astronomy notes",
        ("Choosing a telescope", "A six or eight inch Dobsonian reflector offers the most light-gathering power for "
         "the money and is simple to set up. Aperture matters more than magnification; advertisements promising "
         "hundreds of times magnification are a warning sign of a poor instrument."),
        ("Observing the planets", "Jupiter shows its four largest moons and cloud bands even in a small telescope, "
         "and Saturn's rings are visible at fifty times magnification. Planets look best when high in the sky, "
         "where the light passes through less turbulent air."),
        ("Dark skies", "Light pollution hides faint galaxies and nebulae. Travel at least an hour from a large city "
         "and observe around the new moon. Let your eyes adapt for twenty minutes and use only red light, which "
         "preserves night vision."),
    ),
    "town-history.md": _doc(
        "A short history of Millbrook",
        ("Founding", "Millbrook was founded in 1642 by wool merchants who built a water mill on the river Lune. The "
         "original mill burned down in 1701 and was replaced by a stone building that still stands next to the "
         "bridge and now houses the town museum."),
        ("The railway", "The railway reached Millbrook in 1859, connecting the town to the coal fields in the north. "
         "Within twenty years the population tripled and three textile factories opened along the canal. The "
         "station closed in 1965 and the line became a cycle path."),
        ("The great flood", "In March 1947 melting snow and heavy rain caused the river to burst its banks, flooding "
         "the market square to a depth of two metres. A flood wall built in the 1950s has protected the centre "
         "ever since; a bronze marker on the town hall shows the water level."),
    ),
    "car-maintenance.md": _doc(
        "Car maintenance basics",
        ("Oil changes", "Change the engine oil and filter every fifteen thousand kilometres or once a year, whichever "
         "comes first. Check the level monthly with the dipstick while the engine is cold and the car stands on "
         "level ground. Use the viscosity grade given in the owner's handbook."),
        ("Winter tyres", "Fit winter tyres when temperatures regularly fall below seven degrees. Their softer "
         "compound and deeper sipes grip on snow and slush. The legal minimum tread depth is one point six "
         "millimetres, but four millimetres is recommended for winter driving."),
        ("Battery", "A car battery typically lasts four to six years. Slow cranking on cold mornings is the first "
         "sign of weakness. When jump-starting, connect the red clamps first and attach the final black clamp to "
         "bare metal away from the battery."),
    ),
    "first-aid.md": _doc(
        "First aid essentials",
        ("Burns", "Cool a burn under cool running water for at least twenty minutes, remove rings and watches before "
         "swelling starts, and cover the burn loosely with cling film. Do not apply butter, ice or creams. Seek "
         "medical help for burns larger than the casualty's hand."),
        ("Choking", "Encourage a choking adult to cough. If that fails, give up to five sharp back blows between the "
         "shoulder blades, then up to five abdominal thrusts. Alternate the two and call emergency services if the "
         "obstruction does not clear."),
        ("CPR", "If someone is unresponsive and not breathing normally, call for help and start chest compressions "
         "in the centre of the chest, five to six centimetres deep at a rate of one hundred to one hundred and "
         "twenty per minute. Use a defibrillator as soon as one arrives."),
    ),
    "taxes.md": _doc(
        "Personal tax guide",
        ("Filing deadline", "The annual tax return for individuals is due on the thirty-first of July of the "
         "following year. Taxpayers who use an accredited adviser receive an automatic extension until the end of "
         "February. Late filing incurs a penalty of twenty-five euros per started month."),
        ("Deductible costs", "Work-related costs such as professional literature, union fees and a dedicated home "
         "office room are deductible. Commuting is deducted at a flat rate per kilometre of the one-way distance. "
         "Keep receipts for ten years in case the tax office asks for them."),
        ("Charitable donations", "Donations to registered charities reduce taxable income up to twenty percent of "
         "total income. Amounts below three hundred euros only need a bank statement as proof; larger donations "
         "require an official donation receipt from the organisation."),
    ),
    "photography.md": _doc(
        "Photography basics",
        ("Exposure triangle", "Exposure is controlled by aperture, shutter speed and ISO. A wide aperture such as f "
         "two blurs the background, a fast shutter freezes motion, and a high ISO brightens the image at the cost "
         "of noise. Changing one setting usually means adjusting another."),
        ("Composition", "The rule of thirds places the subject along imaginary lines dividing the frame into "
         "thirds. Leading lines such as roads and fences draw the eye into the picture. Leave space in front of a "
         "moving subject so it has room to move into."),
        ("Golden hour", "The hour after sunrise and before sunset gives warm, soft, directional light that flatters "
         "portraits and landscapes. Midday sun creates harsh shadows; if you must shoot then, look for open shade "
         "or use a reflector."),
    ),
    "home-network.md": _doc(
        "Home network setup",
        ("Router placement", "Place the wireless router in a central, elevated spot away from thick walls, metal "
         "cabinets and microwaves. The five gigahertz band is faster but reaches less far than two point four "
         "gigahertz. A mesh system helps in larger houses with several floors."),
        ("Guest network", "Create a separate guest network so visitors never see your computers, printers or "
         "network storage. Give it its own password and change it every few months. Smart home devices can live "
         "on the guest network too, isolating them from your laptop."),
        ("Firmware updates", "Router vendors fix security holes through firmware updates. Turn on automatic updates "
         "if the router offers them, otherwise check the vendor's site every quarter. Replace routers that no "
         "longer receive updates."),
    ),
    "aquarium.md": _doc(
        "Freshwater aquarium care",
        ("Cycling a new tank", "Before adding fish, cycle the tank for four to six weeks so that bacteria can "
         "convert ammonia into nitrite and then nitrate. Test the water weekly; the tank is ready when ammonia and "
         "nitrite read zero and nitrate appears."),
        ("Water changes", "Replace about a quarter of the water every week with dechlorinated tap water at the same "
         "temperature. Vacuum the gravel during the change to remove waste. Never replace all the water at once, "
         "as that removes the beneficial bacteria."),
        ("Feeding", "Feed small amounts once or twice a day, only as much as the fish eat within two minutes. "
         "Overfeeding is the most common cause of cloudy water and algae. A fasting day once a week is healthy for "
         "most community fish."),
    ),
    "running-plan.md": _doc(
        "Ten-kilometre training plan",
        ("Weekly structure", "The plan has three runs a week for ten weeks: an easy run, an interval session and a "
         "long run at the weekend. The long run grows by one kilometre each week, from five to twelve kilometres, "
         "with a lighter recovery week every fourth week."),
        ("Intervals", "Interval sessions alternate four hundred metres at target race pace with two minutes of "
         "walking or jogging. Start with four repetitions and build up to eight. Warm up for ten minutes before "
         "and cool down afterwards."),
        ("Injury prevention", "Increase total weekly distance by no more than ten percent. Replace running shoes "
         "after about eight hundred kilometres. Pain that changes your stride is a reason to stop and rest; "
         "strength exercises for hips and calves reduce the risk of shin splints."),
    ),
    "wine-storage.md": _doc(
        "Storing wine at home",
        ("Temperature", "Wine keeps best at a steady twelve to fourteen degrees. Fluctuations do more harm than a "
         "constant temperature that is slightly too warm. Kitchens and spaces above the fridge are the worst places "
         "in the house."),
        ("Bottle position", "Store bottles with natural corks lying on their side so the cork stays moist and does "
         "not shrink. Screw-cap bottles may stand upright. Keep wine away from vibration and strong light, which "
         "age it prematurely."),
        ("Opened bottles", "An opened bottle of red keeps three to five days with the cork back in and stored in a "
         "cool place. White and rosé keep a little longer in the fridge. Sparkling wine loses its bubbles within a "
         "day unless closed with a special stopper."),
    ),
    "beekeeping.md": _doc(
        "Beekeeping for beginners",
        ("Hive inspections", "Inspect the hive every seven to ten days during spring and summer, on warm, calm "
         "afternoons. Look for eggs as a sign that the queen is laying, and for queen cells that signal the colony "
         "is preparing to swarm."),
        ("Varroa mites", "Varroa mites weaken colonies and spread viruses. Count the mite drop on a sticky board "
         "under the hive each month. Treat with oxalic acid in winter when the colony has no brood, which is when "
         "the treatment works best."),
        ("Harvesting honey", "Harvest honey only from frames where at least eighty percent of the cells are capped; "
         "uncapped honey holds too much water and ferments. Leave the colony at least fifteen kilograms of stores "
         "for the winter."),
    ),
    "meeting-rooms.md": _doc(
        "Office facilities",
        ("Meeting rooms", "Meeting rooms are booked in the shared calendar and released automatically if nobody "
         "checks in within fifteen minutes. The large boardroom on the fifth floor needs approval from the office "
         "manager. Leave the room tidy and wipe the whiteboard."),
        ("Printing", "Printers are on every floor near the kitchens. Print jobs are released by tapping your access "
         "badge on the printer, which prevents confidential pages from lying in the tray. Colour printing is "
         "limited to two hundred pages per person per month."),
        ("Bicycle parking", "Secure bicycle parking with one hundred spaces is in the basement, reached by the ramp "
         "on Mill Street. Showers and lockers are next to it. Bikes left for more than four weeks without use are "
         "removed after a notice."),
    ),
}


QUESTIONS: list[Question] = [
    # leave policy
    Question("How many days of holiday do full-time staff get each year?", "leave-policy.md", "twenty-eight days"),
    Question("Can I carry unused vacation days into next year?", "leave-policy.md", "carried over"),
    Question("When do I need a doctor's note when I'm ill?", "leave-policy.md", "medical certificate"),
    Question("How long is paternity leave for partners?", "leave-policy.md", "paternity leave"),
    # expenses
    Question("How long do I have to submit an expense claim?", "expenses.md", "within thirty days"),
    Question("What is the daily meal allowance when travelling?", "expenses.md", "forty-five euros"),
    Question("How much is paid per kilometer for using my own car?", "expenses.md", "thirty cents"),
    # it security
    Question("What is the minimum password length?", "it-security.md", "fourteen characters"),
    Question("How do I report a suspicious email?", "it-security.md", "Report Phish"),
    Question("My laptop was stolen, what should I do?", "it-security.md", "wiped remotely"),
    # onboarding
    Question("When should the manager order a laptop for a new hire?", "onboarding.md", "ten working days"),
    Question("What training does a new employee complete in the first week?", "onboarding.md", "two-factor"),
    Question("How long is the probationary period?", "onboarding.md", "six months"),
    # travel
    Question("Can I fly business class on long flights?", "travel.md", "intercontinental"),
    Question("What is the hotel budget per night in Paris?", "travel.md", "two hundred"),
    Question("Is lost baggage covered when I travel for work?", "travel.md", "lost luggage"),
    # remote work
    Question("How many days a week can I work from home?", "remote-work.md", "three days per week"),
    Question("Is there an allowance for an ergonomic chair for my home office?", "remote-work.md", "ergonomic chair"),
    Question("What are the core hours for remote workers?", "remote-work.md", "core hours"),
    # coffee machine
    Question("How do I decalcify the coffee machine?", "coffee-machine.md", "descaling agent"),
    Question("Which grinder setting should I use for espresso?", "coffee-machine.md", "setting three to five"),
    Question("What does error E7 mean?", "coffee-machine.md", "overheated boiler"),
    # e-bike
    Question("How should I store the e-bike battery during winter?", "city-bike.md", "forty and sixty percent"),
    Question("What tire pressure should I use?", "city-bike.md", "three and a half"),
    Question("When do the brake pads need replacing?", "city-bike.md", "one millimetre"),
    # bread
    Question("How much salt goes into the sourdough loaf?", "bread-recipes.md", "ten grams of salt"),
    Question("What hydration should focaccia dough have?", "bread-recipes.md", "eighty percent hydration"),
    Question("Why is my bread dense?", "bread-recipes.md", "under-proofed"),
    # gardening
    Question("When should tomato seedlings be planted outside?", "gardening.md", "above ten degrees"),
    Question("What should I put in my compost heap?", "gardening.md", "grass clippings"),
    Question("How can I get rid of slugs without pesticides?", "gardening.md", "beer traps"),
    # astronomy
    Question("Which telescope is best for a beginner on a budget?", "astronomy.md", "Dobsonian"),
    Question("Can I see Saturn's rings with a small telescope?", "astronomy.md", "fifty times"),
    Question("Why should I use a red flashlight when stargazing?", "astronomy.md", "red light"),
    # town history
    Question("When was Millbrook founded?", "town-history.md", "1642"),
    Question("When did the train station in Millbrook close?", "town-history.md", "1965"),
    Question("How high did the water rise in the 1947 flood?", "town-history.md", "two metres"),
    # car maintenance
    Question("How often should I change the engine oil?", "car-maintenance.md", "fifteen thousand"),
    Question("What tread depth is recommended for snow tyres?", "car-maintenance.md", "four millimetres"),
    Question("In which order do I connect jumper cables?", "car-maintenance.md", "red clamps first"),
    # first aid
    Question("How long should a burn be cooled under water?", "first-aid.md", "twenty minutes"),
    Question("What do I do if an adult is chocking?", "first-aid.md", "back blows"),
    Question("How deep should chest compressions be during resuscitation?", "first-aid.md", "five to six centimetres"),
    # taxes
    Question("When is the income tax return due?", "taxes.md", "thirty-first of July"),
    Question("Can I deduct a home office from my taxes?", "taxes.md", "home office room"),
    Question("What proof do I need for a small charity donation?", "taxes.md", "bank statement"),
    # photography
    Question("How do I get a blurry background in photos?", "photography.md", "wide aperture"),
    Question("What is the rule of thirds?", "photography.md", "rule of thirds"),
    Question("What time of day gives the best light for portraits?", "photography.md", "after sunrise"),
    # home network
    Question("Where should I put my wifi router?", "home-network.md", "central, elevated"),
    Question("Why set up a separate network for visitors?", "home-network.md", "guest network"),
    Question("How often should I check for router firmware updates?", "home-network.md", "every quarter"),
    # aquarium
    Question("How long does it take to cycle a new fish tank?", "aquarium.md", "four to six weeks"),
    Question("How much water should be changed each week in an aquarium?", "aquarium.md", "a quarter"),
    Question("How much should I feed my fish?", "aquarium.md", "within two minutes"),
    # running
    Question("How many runs per week are in the 10k plan?", "running-plan.md", "three runs a week"),
    Question("How long are the intervals in the speed sessions?", "running-plan.md", "four hundred metres"),
    Question("When should I replace my running shoes?", "running-plan.md", "eight hundred kilometres"),
    # wine
    Question("What temperature is ideal for a wine cellar?", "wine-storage.md", "twelve to fourteen"),
    Question("Should wine bottles be stored lying down?", "wine-storage.md", "on their side"),
    Question("How long does an opened bottle of red wine last?", "wine-storage.md", "three to five days"),
    # beekeeping
    Question("How often should I inspect my beehive?", "beekeeping.md", "seven to ten days"),
    Question("When is the best time to treat bees for varroa?", "beekeeping.md", "oxalic acid"),
    Question("When is honey ready to harvest?", "beekeeping.md", "capped"),
    # office facilities
    Question("What happens if nobody checks in to a booked meeting room?", "meeting-rooms.md", "released"),
    Question("How do I release my print job?", "meeting-rooms.md", "tapping your access"),
    Question("Where can I park my bike at the office?", "meeting-rooms.md", "basement"),
    # typed in a hurry: misspelt, run together, or spelt the other way
    Question("how many vacaton days do i get", "leave-policy.md", "twenty-eight days"),
    Question("max hotel price in Tokio?", "travel.md", "two hundred"),
    Question("passwrod rules", "it-security.md", "fourteen characters"),
    Question("reimbursment for private car trips", "expenses.md", "thirty cents"),
    Question("how to jumpstart a car", "car-maintenance.md", "red clamps first"),
    Question("treating varoa", "beekeeping.md", "oxalic acid"),
    Question("tomatoe planting temperature", "gardening.md", "above ten degrees"),
    Question("when to use a defibrilator", "first-aid.md", "five to six centimetres"),
    Question("color printing limit", "meeting-rooms.md", "two hundred pages"),
]


async def index_set(knowledge, owner: str, name: str = "Labelled set") -> str:
    """Indexes every document of the set into a new collection of `knowledge` (a
    `chat_agent.knowledge.Knowledge` on a real store) as the indexing job does: the real parser,
    the chunker, the embedder when there is one. Returns the collection's id."""
    from chat_agent import clock
    from chat_agent.files.documents import parse_document
    from chat_agent.ids import new_id
    from chat_agent.knowledge import Document
    from chat_agent.knowledge.chunking import chunk_document

    collection = await knowledge.create_collection(owner, name)
    for filename, text in DOCUMENTS.items():
        document = Document(new_id("kdoc"), collection.id, owner, new_id("file"), filename, "text/markdown",
                            "indexing", clock.now())
        await knowledge.store.add_document(document)
        parsed = await parse_document(text.encode(), "text/markdown", filename)
        chunks = chunk_document(parsed)
        vectors = None
        if knowledge.embedder is not None:
            vectors = await knowledge.embedder.embed([f"{c.heading}\n{c.text}" for c in chunks])
        assert await knowledge.store.finish_document(owner, document.id, chunks, vectors, None, clock.now())
    return collection.id


async def recall(knowledge, owner: str, collection_id: str, mode: str, k: int = 5) -> float:
    """The share of questions whose answering chunk is among the first `k` results."""
    found = 0
    for question in QUESTIONS:
        hits = await knowledge.search(owner, [collection_id], question.text, k, mode=mode)
        found += any(h.filename == question.filename and question.phrase.lower() in h.text.lower() for h in hits)
    return found / len(QUESTIONS)
